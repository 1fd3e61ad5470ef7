# SPDX-License-Identifier: Apache-2.0
"""The config keys as the daemon knows them and as docs/operations.md
describes them: read by gen-man.py (gsyncd.toml(5)) and check-man.py
(test man_pages), so both read them alike."""
import re
import subprocess
from typing import NamedTuple, Optional


def daemon_keys(gsyncd):
    """[(section, key, default)] as `gsyncd --print-config` prints them; the
    empty file /dev/null keeps a host's own /etc/gsync/gsyncd.toml out."""
    argv = [gsyncd, "--config", "/dev/null", "--print-config"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    out, section = [], None
    for raw in done.stdout.splitlines():
        if raw.startswith("[") and raw.endswith("]"):
            section = raw[1:-1]
        elif " = " in raw and not raw.startswith("#"):
            key, value = raw.split(" = ", 1)
            out.append((section, key, value))
    return out


class Row(NamedTuple):
    default: Optional[str]  # None where a row's defaults do not pair with its keys
    meaning: str


def documented_keys(path):
    """{dotted key: Row} of the "### Keys" table of docs/operations.md."""
    rows, inside = {}, False
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            if raw.startswith("#"):
                inside = raw.strip() == "### Keys"
            elif inside and raw.startswith("| `"):
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", raw.strip())[1:-1]]
                names = re.findall(r"`([a-z_]+\.[a-z_]+)`", cells[0])
                defaults = re.findall(r"`([^`]*)`", cells[1])
                meaning = cells[-1].replace("\\|", "|")
                for i, name in enumerate(names):
                    paired = len(defaults) == len(names)
                    rows[name] = Row(defaults[i] if paired else None, meaning)
    return rows
