#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make-corpus.py [DIR]: writes the seed corpus of every fuzz target.

The seeds are committed under tests/fuzz/corpus/<target>/ (DIR defaults to
it); this script is how they were made, run once, and again only when a
wire layout changes. Each seed is a well-formed input of its target and a
few near misses, so the fuzzer starts from the formats instead of from
nothing. The layouts below are those of protocol/wire.h,
daemon/cluster/messages.h and daemon/transport/*/frame.h (the replay test
checks that every seed still runs).
"""
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cstr(text, size):
    data = text.encode()
    return data[:size - 1] + b"\0" * (size - min(len(data), size - 1))


def hello_request(job, world, rank, local_rank, local_size, version=2, magic=0x4E595347):
    return (struct.pack("<II", magic, version) + cstr(job, 64) +
            struct.pack("<iiiiQII", world, rank, local_rank, local_size, 0, 0, 0))


def submit_entry(opcode, dtype=0, redop=0, count=16, offset=0, root=0, weight=1.0, tag=1, key=7,
                 step=0, flags=0, reserved=0):
    return struct.pack("<QQQQQdIBBBBiI", tag, key, step, offset, count, weight, 0, opcode, dtype,
                       redop, flags, root, reserved)


def frame_header(ftype, length, region=0, offset=0, imm=0, write_id=0, write_len=None):
    if write_len is None:
        write_len = length
    return struct.pack("<IBBHIIQQQQ", 0x54535347, ftype, 0, 1, region, length, offset, imm,
                       write_id, write_len)


def tcp_hello(cluster, build, host, index=0, stream=0, streams=2, proto=2):
    def s(t):
        b = t.encode()
        return struct.pack("<H", len(b)) + b
    return struct.pack("<IIIIQQ", index, stream, streams, proto, 0x1234, 0x5678) + s(cluster) + \
        s(build) + s(host)


def dpdk_frame(ftype, seq, length=0, sack=0, region=0, offset=0, write_len=0, imm=0, flags=0,
               link=7, payload=b"", cluster=0x1234abcd, ethertype=0x88b5):
    """fuzz_dpdk_frame's input: the cluster tag, then an Ethernet frame of
    daemon/transport/dpdk/frame.h (14-byte Ethernet header, 64-byte
    FrameHeader, payload)."""
    eth = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]) + struct.pack(">H", ethertype)
    head = struct.pack("<IBBHIIIIQIIQQQ", 0x50445347, 1, ftype, flags, cluster, link, seq, length,
                       sack, region, 0, offset, write_len, imm)
    return struct.pack("<I", cluster) + eth + head + payload


def job_announce(job, world, ranks):
    return struct.pack("<B3xii", 1, world, len(ranks)) + cstr(job, 64) + \
        b"".join(struct.pack("<i", r) for r in ranks)


def job_leave(job, rank, pid, reason, open_ops):
    return struct.pack("<B3xiiI", 2, rank, pid, len(open_ops)) + cstr(job, 64) + \
        cstr(reason, 160) + b"".join(struct.pack("<QQ", k, s) for k, s in open_ops)


def op_ready(mtype, algo, opcode, dtype, redop, count, chunk_bytes, xfer=0, slot=0, job="j",
             key=1, step=0, weight=1.0, token=5, data_region=1, scratch_region=2, slot_bytes=0):
    return struct.pack("<BBBBBBBx", mtype, algo, opcode, dtype, redop, xfer, slot) + \
        cstr(job, 64) + struct.pack("<QQQQdIIIIQ", key, step, count, chunk_bytes, weight, token,
                                    data_region, scratch_region, 0, slot_bytes)


def op_abort(job, key, step, code, message):
    return struct.pack("<B3xi", 4, code) + cstr(job, 64) + struct.pack("<QQ", key, step) + \
        cstr(message, 240)


# gsyncctl doctor's messages (daemon/cluster/probe_messages.h).
def probe(kind, seq, id, sent_ns, offset=0, total=0, payload=0):
    return struct.pack("<BBxxIQqQQ", 16, kind, seq, id, sent_ns, offset, total) + bytes(payload)


def probe_reply(kind, seq, id, sent_ns, received_ns, replied_ns, nbytes=0):
    return struct.pack("<BBxxIQqqqQ", 17, kind, seq, id, sent_ns, received_ns, replied_ns, nbytes)


def host_info(pid, version, build):
    return struct.pack("<B3xI", 15, pid) + cstr(version, 32) + cstr(build, 80)


# Batch leases' messages (daemon/leases/messages.h), each with the length
# byte the leases target reads first.
def lease_ask(job, rank, id, epoch, batches, clock):
    m = struct.pack("<B3xi", 11, rank) + cstr(job, 64) + struct.pack("<QQQQ", id, epoch, batches,
                                                                      clock)
    return bytes([len(m)]) + m


def lease_settle(job, rank, clock, mtype=13):
    m = struct.pack("<B3xi", mtype, rank) + cstr(job, 64) + struct.pack("<Q", clock)
    return bytes([len(m)]) + m


def lease_grant(id, code, value, message):
    m = struct.pack("<B3xiQII", 12, code, id, value, 0) + cstr(message, 200)
    return bytes([len(m)]) + m


def scenario(hosts, self, two_racks, algo, peer, world):
    return bytes([hosts - 2, self, two_racks, algo, peer, world - 1])


def codec_header(fmt, block, count, n, length):
    """daemon/reduce/codec_wire.h's 32-byte header, version 1."""
    return struct.pack("<BBHIQQQ", fmt, 1, 0, block, count, n, length)


def codec_seed(mode, count, body):
    """fuzz_codec's input: a mode byte, the count (u16), the rest."""
    return bytes([mode]) + struct.pack("<H", count) + body


def int8_encoding():
    # 128 values in 2 blocks of 64: block 0 scaled by 1/127, block 1 zeros.
    head = codec_header(4, 64, 128, 0, 192) + struct.pack("<ff", 1.0 / 127, 0.0)
    q = bytes((i - 32) & 0xff for i in range(64)) + bytes(64)
    return head + bytes(64 - len(head)) + q


def int8_flagged():
    # One block of 64 carried raw: scale +Inf, zero int8 values, raw fp32.
    head = codec_header(4, 64, 64, 1, 384) + struct.pack("<I", 0x7f800000)
    raw = struct.pack("<64f", *[float(i) for i in range(63)] + [float("nan")])
    return head + bytes(64 - len(head)) + bytes(64) + raw


ETCD_HEADER = (b'"header":{"cluster_id":"14841639068965178418","member_id":'
               b'"10276657743932975437","revision":"9","raft_term":"2"}')


def etcd_answer(fields):
    """A unary answer of etcd's JSON gateway: the header, then fields."""
    return b"{" + ETCD_HEADER + (b"," + fields if fields else b"") + b"}"


def etcd_result(fields):
    """A streamed answer (watch, keepalive): one {"result": ...} line."""
    return b'{"result":' + etcd_answer(fields) + b"}\n"


def parts(*msgs):
    return b"".join(struct.pack("<H", len(m)) + m for m in msgs)


SEEDS = {
    "admin": {
        "status": b"\0status\n",
        "jobs-crlf": b"\0jobs\r\n",
        "closed-no-newline": b"\1status",
        "issue15-utf8": b"\0\xed\xa0\x80\n",
        "too-long": b"\0" + b"a" * 300,
        "unknown": b"\0staus\n",
        "peers": b"\0peers\n",
    },
    "config": {
        "example": None,  # deploy/gsyncd.toml, read below
        "admin-keys": b'[daemon]\nadmin_socket_mode = 0o660\nadmin_group = "gsync"\n',
        "limits": b'[limits]\nring_entries = 1024\ndefault_arena = "256M"\nmax_arena = "1G"\n',
        "cluster": b'[cluster]\nalgorithm = "ring"\ntcp_streams = 2\nchunk_bytes = "1M"\n',
        "auth": b"[auth]\nallowed_uids = [0, 1000]\nallowed_gids = []\n",
        "bad-mode": b"[daemon]\nsocket_mode = 666\n",
    },
    "cluster_file": {
        "two-hosts": b'name = "prod-a"\n[[hosts]]\nid = "h1"\naddress = "10.0.0.1"\nport = 7700\n'
                     b'rack = "r1"\n[[hosts]]\nid = "h2"\naddress = "10.0.0.2"\nport = 7700\n'
                     b'rack = "r1"\n',
        "two-racks": b'name = "c"\n' + b"".join(
            b'[[hosts]]\nid = "h%d"\naddress = "127.0.0.1"\nport = %d\nrack = "r%d"\n' %
            (i, 7700 + i, 1 + i // 2) for i in range(4)),
        "duplicate": b'name = "c"\n[[hosts]]\nid = "h"\naddress = "a"\nport = 1\n'
                     b'[[hosts]]\nid = "h"\naddress = "b"\nport = 1\n',
    },
    "client_hello": {
        "single-host": b"\0" + hello_request("train-1", 2, 1, 1, 2),
        "multi-host": b"\1" + hello_request("train-2", 8, 5, 1, 4),
        "other-version": b"\0" + hello_request("v", 1, 0, 0, 1, version=9),
        "bad-shape": b"\0" + hello_request("shape", 2, 5, 0, 2),
        "short": b"\0GSYN",
    },
    "submission": {
        "allreduce": submit_entry(1) + bytes([1]) + struct.pack("<Q", 1 << 20),
        "weighted": submit_entry(1, dtype=1, redop=2, weight=3.5) + bytes([3]) +
        struct.pack("<Q", 1 << 20),
        "broadcast": submit_entry(2, dtype=3, root=2) + bytes([3]) + struct.pack("<Q", 4096),
        "barrier": submit_entry(3, count=0, key=(1 << 64) - 1) + bytes([1]) +
        struct.pack("<Q", 4096),
        "past-arena": submit_entry(1, offset=4000) + bytes([1]) + struct.pack("<Q", 4096),
    },
    "tcp_frame": {
        "hello": (lambda p: frame_header(1, len(p)) + p)(tcp_hello("prod-a", "0.1.0", "h1")),
        "hello-ack": (lambda p: frame_header(2, len(p)) + p)(
            tcp_hello("prod-a", "0.1.0", "h2", index=1, stream=1)),
        "write": frame_header(5, 64, region=1, offset=128) + bytes([2, 0, 1, 0, 16, 0, 0]) +
        bytes(57),
        "refuse": (lambda p: frame_header(3, len(p)) + p)(b"cluster name mismatch"),
        "heartbeat": frame_header(6, 0),
    },
    # The tag first; a HELLO or READY seed's tag is not read by the decoders.
    "dpdk_frame": {
        "data-last": dpdk_frame(1, 41, 100, region=3, offset=4096 + 1400, write_len=1500,
                                imm=0x1122, flags=1, payload=bytes(range(100))),
        "data-middle": dpdk_frame(1, 40, 1400, region=3, offset=4096, payload=bytes(1400)),
        "data-empty-write": dpdk_frame(1, 0xffffffff, 0, region=1, offset=64, flags=1),
        "ack": dpdk_frame(2, 42, 512, sack=0x8000000000000005),
        "foreign": dpdk_frame(2, 42, 512, ethertype=0x0800),
        "hello": struct.pack("<I", 0) + b"H" + bytes([2, 0, 0, 0, 0, 1]) +
        struct.pack("<III", 9, 1400, 512),
        "ready": struct.pack("<I", 0) + b"R" + struct.pack("<II", 9, 7),
    },
    "bootstrap": {
        "caps": parts(b"C\x01rxe0 port 1 gid 1", b"C\x00no RDMA device"),
        "retire": parts(b"X" + struct.pack("<I", 7), b"A" + struct.pack("<I", 7)),
        "qp-info": parts(b"Q" + struct.pack("<IIH", 17, 99, 0) + bytes(16) +
                         struct.pack("<BBI", 3, 2, 64),
                         b"R" + struct.pack("<II", 17, 18)),
        "region": parts(b"G" + struct.pack("<IQQI", 3, 0x7f0000001000, 4096, 0x1234),
                        b"G" + struct.pack("<IQQI", 4, 0, 0, 0) + b"ibv_reg_mr: ENOMEM"),
        "user-parts": parts(b"F" + b"x" * 100, b"U" + b"y" * 10, b"U" + b"z"),
    },
    "codec": {
        "dense32": codec_seed(0, 8, codec_header(1, 0, 8, 0, 64) + struct.pack("<8f", *range(8))),
        "fp16": codec_seed(0, 8, codec_header(2, 0, 8, 0, 48) + struct.pack("<8H", *range(0x3c00, 0x3c08))),
        "bf16": codec_seed(0, 8, codec_header(3, 0, 8, 0, 48) + struct.pack("<8H", *range(0x3f80, 0x3f88))),
        "int8": codec_seed(0, 128, int8_encoding()),
        "int8-flagged": codec_seed(0, 64, int8_flagged()),
        "sparse": codec_seed(0, 100, codec_header(5, 0, 100, 3, 56) +
                             struct.pack("<IfIfIf", 3, 1.5, 40, -2.0, 99, 7.25)),
        "sparse-unsorted": codec_seed(0, 100, codec_header(5, 0, 100, 2, 48) +
                                      struct.pack("<IfIf", 40, 1.0, 3, 2.0)),
        "short-length": codec_seed(0, 8, codec_header(1, 0, 8, 0, 60) + bytes(28)),
        "encode-int8": codec_seed(1, 16, bytes([3, 0, 10]) + struct.pack("<16f", *range(-8, 8))),
        "encode-topk": codec_seed(1, 16, bytes([4, 0, 20]) + struct.pack("<16f", *range(16))),
        "encode-fp16": codec_seed(1, 4, bytes([1, 0, 0]) + struct.pack("<4f", 1e5, -0.0, 3.0, 6e-8)),
        "int8-sum": codec_seed(2, 128, bytes([0]) + struct.pack("<HH", 192, 192) +
                               int8_encoding() * 2),
    },
    "control_messages": {
        "announce": scenario(2, 0, 0, 3, 1, 2) + job_announce("j", 2, [1]),
        "announce-three": scenario(3, 1, 0, 1, 2, 3) + job_announce("j", 3, [2, 1]),
        "leave": scenario(2, 0, 0, 0, 1, 2) + job_leave("j", 1, 4242, "killed", [(1, 0), (2, 0)]),
        "abort": scenario(2, 0, 0, 0, 1, 2) + op_abort("j", 1, 0, -9, "bad data"),
        "ready-ring": scenario(2, 0, 0, 1, 1, 2) + op_ready(3, 1, 1, 0, 0, 30011, 0),
        "data-direct": scenario(2, 0, 0, 3, 1, 2) + op_ready(5, 3, 1, 0, 0, 16, 64, slot=1) +
        bytes(64),
        "data-tree": scenario(4, 0, 1, 4, 2, 4) + op_ready(5, 4, 1, 0, 0, 256, 1024) + bytes(1024),
        "data-doubling": scenario(4, 1, 0, 5, 0, 4) + op_ready(5, 5, 1, 1, 1, 100, 200) +
        bytes(200),
        "probe-ping": scenario(2, 0, 0, 0, 1, 2) + probe(0, 1, 7, 1700000000000000000),
        "probe-ping-with-payload": scenario(2, 0, 0, 0, 1, 2) + probe(0, 1, 7, 5, payload=8),
        "probe-data-last": scenario(2, 0, 0, 0, 1, 2) + probe(1, 17, 7, 5, 64, 128, 64),
        "probe-data-middle": scenario(2, 0, 0, 0, 1, 2) + probe(1, 17, 7, 5, 0, 128, 64),
        "probe-data-past-its-burst": scenario(2, 0, 0, 0, 1, 2) + probe(1, 17, 7, 5, 96, 128, 64),
        "probe-reply-ping": scenario(2, 0, 0, 0, 1, 2) + probe_reply(0, 3, 7, 100, 160, 170),
        "probe-reply-data": scenario(2, 0, 0, 0, 1, 2) + probe_reply(1, 80, 7, 100, 160, 170,
                                                                    4 << 20),
        "host-info": scenario(2, 0, 0, 0, 1, 2) + host_info(4242, "0.1.0", "7ae47e692ddc07b5"),
    },
    "leases": {
        "an-epoch": b"".join(lease_ask("j", r % 2, r, 0, 3, r // 2) for r in range(4)) +
        lease_settle("j", 0, 0) + lease_settle("j", 1, 0) + lease_settle("j", 0, 1) +
        lease_ask("j", 1, 9, 0, 3, 2),
        "a-drop": lease_ask("j", 0, 1, 1, 4, 0) + lease_ask("j", 1, 2, 1, 4, 0) +
        lease_settle("j", 1, 0, mtype=14) + lease_ask("j", 0, 3, 1, 4, 1),
        "grant": lease_grant(5, -8, 0, "job j: rank 1 leases from epoch 0 of 4 batches"),
    },
    # A host's record in etcd (daemon/cluster/etcd/record.h).
    "etcd_record": {
        "record": b'{"address":"10.0.1.11","build_id":"7ae47e692ddc07b5","id":"h11","pid":4242,'
                  b'"port":7700,"rack":"r1","slot":3,"version":"0.5.0"}',
        "no-build": b'{"address":"127.0.0.1","build_id":"","id":"h1","pid":1,"port":1,'
                    b'"rack":"default","slot":0,"version":""}',
        "bad-slot": b'{"address":"a","build_id":"","id":"h","pid":1,"port":1,"rack":"r",'
                    b'"slot":4096,"version":""}',
    },
    # etcd's JSON gateway (daemon/cluster/etcd/responses.h), as etcd 3.4.23
    # answers: the parser's byte (0 watch, 1 range, 2 keepalive, 3 txn,
    # 4 grant, 5 header, 6 base64, 7 prefix_end), then the text.
    "etcd_response": {
        "watch-created": b"\0" + etcd_result(b'"created":true'),
        "watch-put-delete": b"\0" + etcd_result(
            b'"events":[{"kv":{"key":"dy9h","create_revision":"7","mod_revision":"8",'
            b'"version":"2","value":"Mg=="}},{"type":"DELETE","kv":{"key":"dy9h",'
            b'"mod_revision":"9"}}]'),
        "watch-compacted": b'\0{"result":{"header":{"raft_term":"2"},"canceled":true,'
                           b'"compact_revision":"8"}}',
        "watch-stream-error": b'\0{"error":{"grpc_code":14,"http_code":503,'
                              b'"message":"etcdserver: no leader","http_status":"Unavailable"}}',
        "range": b"\1" + etcd_answer(
            b'"kvs":[{"key":"YS94","create_revision":"4","mod_revision":"4","version":"1",'
            b'"value":"djE=","lease":"7587899320881956624"}],"count":"1"'),
        "range-empty": b"\1" + etcd_answer(b""),
        "keepalive": b"\2" + etcd_result(b'"ID":"7587899320881956624","TTL":"2"'),
        "keepalive-expired": b"\2" + etcd_result(b'"ID":"7587899320881956624"'),
        "txn-succeeded": b"\3" + etcd_answer(
            b'"succeeded":true,"responses":[{"response_put":{"header":{"revision":"6"}}}]'),
        "txn-failed": b"\3" + etcd_answer(
            b'"responses":[{"response_range":{"header":{"revision":"6"},"kvs":[{"key":"dC8x",'
            b'"create_revision":"6","mod_revision":"6","version":"1","value":"b25l"}],'
            b'"count":"1"}}]'),
        "grant": b"\4" + etcd_answer(b'"ID":"7587899320881956622","TTL":"2"'),
        "lease-not-found": b'\5{"error":"etcdserver: requested lease not found",'
                           b'"message":"etcdserver: requested lease not found","code":5}',
        "put": b"\5" + etcd_answer(b""),
        "base64": b"\6djE=",
        "prefix-end": b"\7/gsync/prod-a/hosts/\xff",
    },
    # The tuning table's file (daemon/tuning/tune_table.h), as gsync-perf
    # --tune writes it, and one that repeats a band.
    "tuning": {
        "table": b'{"format": 1, "entries": [{"hosts": ["h1", "h2"], "bytes": 4096, '
                 b'"algorithm": "direct", "chunk_bytes": 0, "us": 45.3}, {"hosts": ["h1", "h2"], '
                 b'"bytes": 67108864, "algorithm": "ring", "chunk_bytes": 1048576, "us": 9e4}]}',
        "two-of-a-band": b'{"format": 1, "entries": [{"hosts": ["a"], "bytes": 8, "algorithm": '
                         b'"tree"}, {"hosts": ["a"], "bytes": 7, "algorithm": "doubling"}]}',
    },
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fuzz", "corpus")
    with open(os.path.join(ROOT, "deploy", "gsyncd.toml"), "rb") as f:
        SEEDS["config"]["example"] = f.read()
    for target, seeds in SEEDS.items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    print(f"make-corpus: {sum(len(s) for s in SEEDS.values())} seeds in {out}")


if __name__ == "__main__":
    main()
