#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""etcd_scale.py: how fast one gsyncd learns a membership change among N hosts.

Starts its own etcd (temporary data dir, free ports on 127.0.0.1) and one real gsyncd
in it (slot 0), then registers N simulated hosts as daemons do (docs/membership.md,
"Keys"): host i claims slot i (slots/id/<id>, slots/n/<i>, one transaction) and writes
hosts/<id> under a lease of its own, renewed here every ttl/3. They are at 127.0.0.1
on a closed port: gsyncd lists them and keeps trying to link; those links never come up.
Measures the registration rate; over K changes, one at a time, alternately a leave
(delete of a host's key) and a join (its put again), the time until gsyncd's status
(admin socket polled every 2 ms) shows it, and until a watch of hosts/ like a daemon's
receives it, with that watch's events and bytes per change; etcd's RSS and db size;
gsyncd's RSS, CPU, wakeups, log and admin answers with N peers. Then the arithmetic
for 10,000 hosts from those figures (labelled: not measured).

    python3 tools/bench/etcd_scale.py [--hosts 1000] [--changes 50] [--json]

GSYNCD, GSYNCCTL, ETCD: the binaries (default build/daemon/gsyncd,
build/tools/gsyncctl/gsyncctl, etcd on $PATH). Figures: docs/performance.md.
"""
import argparse, base64, http.client, json, os, shutil, signal, socket, statistics
import subprocess, sys, tempfile, threading, time

CLUSTER = "/gsync/bench/"  # etcd_prefix + name + "/"
POLL_S = 0.002
MAX_SLOTS = 4096  # kMaxSlots, daemon/cluster/etcd/record.h
NET_ERRORS = (OSError, http.client.HTTPException)


class Failed(Exception):
    pass


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Gateway:
    """One keep-alive connection to etcd's JSON gateway."""

    def __init__(self, port):
        self.port, self.conn = port, None

    def call(self, path, body):
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                self.conn.request("POST", path, json.dumps(body))
                r = self.conn.getresponse()
                text = r.read()
                if r.status != 200:
                    raise Failed(f"etcd {path}: HTTP {r.status}: {text[:300]!r}")
                return json.loads(text.splitlines()[0])
            except NET_ERRORS:
                self.conn = None
                if attempt:
                    raise


def free_port(ephemeral=True):
    """A port nothing listens on. A simulated host's is below the ephemeral range:
    a connect to 127.0.0.1:P from local port P succeeds (TCP simultaneous open)."""
    for p in [0] if ephemeral else range(20000, 32000, 7):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return s.getsockname()[1]
            except OSError:
                pass
    raise Failed("no free port on 127.0.0.1")


def tail(path, n=2000):
    with open(path, "rb") as f:
        return f.read()[-n:].decode(errors="replace")


def proc_status(pid, field):  # VmRSS (kB), Threads, voluntary_ctxt_switches...
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def wakeups(pid):  # voluntary context switches of all its threads
    return sum(proc_status(f"{pid}/task/{t}", "voluntary_ctxt_switches")
               for t in os.listdir(f"/proc/{pid}/task"))


def tcp_attempt_fails():  # failed connects on this host (all processes), /proc/net/snmp
    with open("/proc/net/snmp") as f:
        names, values = [line.split() for line in f if line.startswith("Tcp:")]
    return int(values[names.index("AttemptFails")])


def admin(path, cmd):
    """One admin request, as gsyncctl sends it (docs/operations.md, "The admin protocol")."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(cmd.encode() + b"\n")
        return s.makefile("rb").read()  # the daemon closes after its answer


def wait_for(what, deadline_s, check, proc=None, log=None):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise Failed(f"{what}: the process exited ({proc.returncode}); {log}:\n{tail(log)}")
        if (v := check()) is not None:
            return v
        time.sleep(0.02)
    raise Failed(f"{what}: not within {deadline_s} s" + (f"; {log}:\n{tail(log)}" if log else ""))


def ms3(xs):  # median, p90, max in ms
    xs = sorted(xs)
    return {"median": round(1e3 * statistics.median(xs), 2),
            "p90": round(1e3 * xs[round(0.9 * (len(xs) - 1))], 2), "max": round(1e3 * xs[-1], 2)}


class Watch(threading.Thread):
    """A watch on hosts/ of its own: events and bytes, and when the last event came."""

    def __init__(self, port):
        super().__init__(daemon=True)
        p = CLUSTER + "hosts/"
        self.conn = http.client.HTTPConnection("127.0.0.1", port)
        self.conn.request("POST", "/v3/watch", json.dumps({"create_request": {
            "key": b64(p), "range_end": b64(p[:-1] + chr(ord(p[-1]) + 1))}}))
        self.resp = self.conn.getresponse()
        if b'"created":true' not in (first := self.resp.readline()):
            raise Failed(f"etcd /v3/watch: {first[:300]!r}")
        self.events, self.bytes, self.last_at, self.sizes = 0, 0, 0.0, []

    def run(self):
        while line := self.resp.readline():
            n = len(json.loads(line).get("result", {}).get("events", []))
            self.bytes += len(line)
            if n:  # not a progress notice, nor the cancel at the end
                self.last_at, self.events = time.monotonic(), self.events + n
                self.sizes += [len(line) / n] * n


def spawn(procs, argv, log):
    with open(log, "wb") as out:
        procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT))
    return procs[-1]


def register_hosts(gw, n, ttl, port, leases):
    """Hosts sim0001.. at slots 1..n, as Registry::claim_slot and register_self write them."""
    ids, records = [f"sim{i:04d}" for i in range(1, n + 1)], {}
    for slot, hid in enumerate(ids, 1):
        lease = gw.call("/v3/lease/grant", {"TTL": ttl})["ID"]
        leases.append(lease)
        sid, sn = f"{CLUSTER}slots/id/{hid}", f"{CLUSTER}slots/n/{slot}"
        r = gw.call("/v3/kv/txn", {  # both slot keys, only if neither is there
            "compare": [{"key": b64(k), "target": "CREATE", "create_revision": "0"}
                        for k in (sid, sn)],
            "success": [{"request_put": {"key": b64(sid), "value": b64(str(slot))}},
                        {"request_put": {"key": b64(sn), "value": b64(hid)}}]})
        if not r.get("succeeded"):
            raise Failed(f"slot {slot} for {hid}: taken already")
        rec = json.dumps({"address": "127.0.0.1", "build_id": "0" * 40, "id": hid,
                          "pid": 100000 + slot, "port": port, "rack": "r1", "slot": slot,
                          "version": "0.1.0"}, separators=(",", ":"))  # as a daemon's
        records[hid] = {"key": b64(CLUSTER + "hosts/" + hid), "value": b64(rec), "lease": lease}
        gw.call("/v3/kv/put", records[hid])
    return ids, records


def print_table(r, header):
    print(header)
    for k, v in r.items():
        if k == "arithmetic_10000_hosts":
            print("At 10,000 hosts: arithmetic from the figures above, not measured (ttl 10 s)")
        for kk, vv in (v.items() if isinstance(v, dict) else [("", v)]):
            name = kk if k == "arithmetic_10000_hosts" else k + (" " + kk if kk else "")
            print(f"  {name:<40} {vv}")


def measure_changes(gw, watch, hosts_now, ids, records, a):
    """K changes, one at a time: a leave (delete), a join (the put again), ..."""
    learn, plain, per_change, poll_rtt = [], [], [], []
    for k in range(a.changes):
        hid = ids[(k // 2) % len(ids)]
        ev0, by0, want = watch.events, watch.bytes, a.hosts + (k % 2)
        t = time.monotonic()
        if k % 2 == 0:
            gw.call("/v3/kv/deleterange", {"key": records[hid]["key"]})
        else:
            gw.call("/v3/kv/put", records[hid])
        while True:
            q = time.monotonic()
            n = hosts_now()
            poll_rtt.append(time.monotonic() - q)
            if n == want:
                learn.append(time.monotonic() - t)
                break
            if q > t + 10:
                raise Failed(f"change {k} ({hid}): after 10 s gsyncd lists {n} hosts, not {want}")
            time.sleep(POLL_S)
        wait_for(f"change {k} ({hid}) on the bench's watch", 10,
                 lambda: watch.events > ev0 or None)
        plain.append(watch.last_at - t)
        per_change.append((watch.events - ev0, watch.bytes - by0))
    return learn, plain, per_change, poll_rtt


def run(a, tmp, procs, gsyncd, gsyncctl, etcd_bin):
    # etcd, checked to be this one by its name: another on a port taken meanwhile is not.
    name, elog, dlog = f"gsync-bench-{os.getpid()}", f"{tmp}/etcd.log", f"{tmp}/gsyncd.log"
    cport = free_port()
    cu, pu = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{free_port()}"
    etcd = spawn(procs, [etcd_bin, "--name", name, "--data-dir", f"{tmp}/etcd",
                         "--listen-client-urls", cu, "--advertise-client-urls", cu,
                         "--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
                         "--initial-cluster", f"{name}={pu}"], elog)
    gw = Gateway(cport)

    def etcd_is_ours():
        try:
            ms = gw.call("/v3/cluster/member/list", {}).get("members", [])
            return any(m.get("name") == name for m in ms) or None
        except (*NET_ERRORS, Failed):
            return None
    wait_for(f"etcd on {cu}", 15, etcd_is_ours, etcd, elog)

    # The real daemon: the first to claim, so slot 0.
    key, asock = f"{tmp}/cluster.key", f"{tmp}/a.sock"
    kg = subprocess.run([gsyncctl, "keygen", "-o", key], capture_output=True, text=True)
    if kg.returncode != 0:
        raise Failed(f"{gsyncctl} keygen -o {key}: {kg.stderr.strip()}")
    daemon = spawn(procs, [gsyncd, "--socket", f"{tmp}/g.sock", "--admin-socket", asock,
                           "--cluster-key", key, "--etcd", cu, "--cluster-name", "bench",
                           "--host-id", "h0", "--address", "127.0.0.1", "--port",
                           str(free_port()), "--rack", "r1", "--etcd-lease-ttl-s", "10"], dlog)

    def registered():
        r = subprocess.run([gsyncctl, "-s", asock, "--timeout-ms", "2000", "status", "--json"],
                           capture_output=True, text=True)
        m = json.loads(r.stdout).get("membership") or {} if r.returncode == 0 else {}
        return m.get("source") == "etcd" and m["etcd"]["up"] or None
    wait_for("gsyncd registering in etcd", 20, registered, daemon, dlog)

    def hosts_now():
        return json.loads(admin(asock, "status"))["membership"]["hosts"]

    def db_size():
        return int(gw.call("/v3/maintenance/status", {}).get("dbSize", 0))
    db0 = db_size()

    # The simulated hosts; their leases renewed in one pass every ttl/3.
    closed = free_port(ephemeral=False)
    leases, stop, passes = [], threading.Event(), [0]

    def keep():  # should it fail, the check of every lease at the end says so
        k = Gateway(cport)
        while not stop.wait(a.ttl / 3):
            for lease in list(leases):
                k.call("/v3/lease/keepalive", {"ID": lease})
            passes[0] += 1
    threading.Thread(target=keep, daemon=True).start()
    t0, cpu0 = time.monotonic(), cpu_s(daemon.pid)
    ids, records = register_hosts(gw, a.hosts, a.ttl, closed, leases)
    reg_s = time.monotonic() - t0
    wait_for(f"gsyncd listing {a.hosts + 1} hosts", 120,
             lambda: hosts_now() == a.hosts + 1 or None, daemon, dlog)
    r = {"hosts": a.hosts + 1, "simulated_lease_ttl_s": a.ttl, "registration_s": round(reg_s, 2),
         "registration_hosts_per_s": round(a.hosts / reg_s, 1),
         "registration_keys_leases_per_s": round(4 * a.hosts / reg_s, 1),
         "gsyncd_lists_all_after_s": round(time.monotonic() - t0 - reg_s, 3),
         "gsyncd_cpu_pct_registering": round(100 * (cpu_s(daemon.pid) - cpu0)
                                             / (time.monotonic() - t0), 1),
         "etcd_rss_kib": proc_status(etcd.pid, "VmRSS"), "etcd_db_bytes": db_size(),
         "etcd_db_bytes_empty": db0, "etcd_data_dir_bytes": sum(  # with its preallocated WAL
             os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(f"{tmp}/etcd") for f in fs)}
    log_lines0 = tail(dlog, 1 << 30).count("\n")

    watch = Watch(cport)
    watch.start()
    t1, cpu1 = time.monotonic(), cpu_s(daemon.pid)
    learn, plain, per_change, poll_rtt = measure_changes(gw, watch, hosts_now, ids, records, a)
    cpu_changes = 100 * (cpu_s(daemon.pid) - cpu1) / (time.monotonic() - t1)
    # At rest: nobody polls; the daemon only retries its links to the simulated hosts.
    cpu2, wake2, fails2 = cpu_s(daemon.pid), wakeups(daemon.pid), tcp_attempt_fails()
    time.sleep(a.idle_s)
    cpu_rest, wake_rest = cpu_s(daemon.pid) - cpu2, wakeups(daemon.pid) - wake2
    fails_rest = tcp_attempt_fails() - fails2
    stop.set()
    t = time.monotonic()  # one more pass, timed: every simulated lease must still be there
    alive = sum(int(gw.call("/v3/lease/keepalive", {"ID": lease}).get("result", {}).get("TTL", 0))
                > 0 for lease in leases)
    renew_rate = len(leases) / (time.monotonic() - t)
    if alive != len(leases):
        raise Failed(f"{len(leases) - alive} of the simulated hosts' leases expired")
    answer = {"status": [], "peers": []}
    for _ in range(10):
        for cmd, times in answer.items():
            q = time.monotonic()
            out = admin(asock, cmd)
            times.append(1e3 * (time.monotonic() - q))
    peers = json.loads(out).get("peers", [])
    bpe = statistics.median(watch.sizes)
    r.update({
        "changes": a.changes, "poll_interval_ms": 1e3 * POLL_S,
        "status_answer_ms_while_polling": round(1e3 * statistics.median(poll_rtt), 2),
        "learn_ms": ms3(learn), "plain_watch_ms": ms3(plain),
        "watch_events_per_change": statistics.median(e for e, _ in per_change),
        "watch_bytes_per_change": statistics.median(b for _, b in per_change),
        "watch_bytes_per_event": bpe,
        "gsyncd_rss_kib": proc_status(daemon.pid, "VmRSS"),
        "gsyncd_threads": proc_status(daemon.pid, "Threads"),
        "gsyncd_fds": len(os.listdir(f"/proc/{daemon.pid}/fd")),
        "gsyncd_cpu_pct_changes_polled": round(cpu_changes, 1),
        "gsyncd_cpu_pct_at_rest": round(100 * cpu_rest / a.idle_s, 1),
        "gsyncd_wakeups_per_s_at_rest": round(wake_rest / a.idle_s),
        "refused_connects_per_s_at_rest_host_wide": round(fails_rest / a.idle_s),
        "gsyncd_log_lines": tail(dlog, 1 << 30).count("\n"),
        "gsyncd_log_lines_after_registration": tail(dlog, 1 << 30).count("\n") - log_lines0,
        "admin_status_ms": round(statistics.median(answer["status"]), 2),
        "admin_peers_ms": round(statistics.median(answer["peers"]), 2),
        "admin_peers_bytes": len(out), "peers_listed": len(peers),
        "peers_up": sum(p.get("state") == "up" for p in peers),
        "keepalive_passes_during_run": passes[0],
        "keepalives_per_s_one_client": round(renew_rate, 1)})
    H, ttl = 10000, 10  # not measured: arithmetic from the figures above
    r["arithmetic_10000_hosts"] = {
        "keepalives_per_s_ttl10": H * 3 / ttl, "watch_events_per_change": H,
        "watch_bytes_per_change": round(H * bpe),
        "etcd_db_bytes": round(db0 + (r["etcd_db_bytes"] - db0) * H / a.hosts),
        "fits_in_one_cluster": H <= MAX_SLOTS}
    if a.json:
        return print(json.dumps(r))
    print_table(r, f"etcd {cu}; gsyncd h0 and {a.hosts} simulated hosts at 127.0.0.1:{closed}, "
                f"a closed port: links to them never come up. Learn times: gsyncd's status "
                f"polled every {1e3 * POLL_S:g} ms (+ one answer). Lease renewals: one client, "
                f"in sequence.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=1000, help="simulated hosts (1..4095)")
    ap.add_argument("--changes", type=int, default=50, help="joins and leaves measured")
    ap.add_argument("--ttl", type=int, default=30, help="the simulated hosts' lease ttl, s")
    ap.add_argument("--idle-s", type=float, default=5, help="gsyncd's CPU at rest over this")
    ap.add_argument("--keep", action="store_true", help="keep the temporary dir (the logs)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    a = ap.parse_args()
    if not 1 <= a.hosts < MAX_SLOTS or a.changes < 2 or a.ttl < 3:
        ap.error(f"--hosts 1..{MAX_SLOTS - 1} (slot 0 is the daemon's), --changes >= 2, --ttl >= 3")
    bins = [os.environ.get("GSYNCD", "build/daemon/gsyncd"),
            os.environ.get("GSYNCCTL", "build/tools/gsyncctl/gsyncctl"),
            os.environ.get("ETCD") or shutil.which("etcd") or "/usr/bin/etcd"]
    for b in bins:
        if not os.access(b, os.X_OK):
            raise Failed(f"{b} is not an executable (set GSYNCD, GSYNCCTL or ETCD)")
    tmp, procs, keep = tempfile.mkdtemp(prefix="gsync-etcd-scale."), [], a.keep
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # as Ctrl-C: through finally
    try:
        run(a, tmp, procs, *bins)
    except Failed:
        keep = True  # the logs the error names
        raise
    finally:
        for p in reversed(procs):  # gsyncd first: it revokes its lease on the way out
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if keep:
            print(f"etcd_scale: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except Failed as e:
        sys.exit(f"etcd_scale: {e}")
    except KeyboardInterrupt:
        sys.exit(130)
