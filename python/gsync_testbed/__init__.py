# SPDX-License-Identifier: Apache-2.0
"""Test and demo tooling around gsync, apart from the product package
`gsync`: a multi-host test bed driven from Python (`Testbed`, over the
`gsync-testbed` CLI, docs/testbed.md) and a torchrun-style launcher that
spreads a job's ranks over the bed's hosts (`spawn_ranks`). Tests, the
examples and the benchmarks use it; a training script needs only `gsync`."""
from gsync_testbed.bed import Host, Testbed, find_tool
from gsync_testbed.launch import free_port, rank_env, spawn_ranks

__all__ = ["Host", "Testbed", "find_tool", "free_port", "rank_env", "spawn_ranks"]
