"""Where a secure-forward session's online time goes, at each party (issue 42; speaker sessions too): a profile.

Runs ``bench/session_driver.py --workload keyword`` (one OS process per party, mutual TLS on loopback,
2048-bit keys, 98 frames × 39-d against 10 five-state HMMs, m = 1; or ``--workload speaker-verify`` with the
driver's options after ``--``: a GMM's mixture LOGSUMs) with timing wrappers installed in both
party processes by a ``sitecustomize`` on their ``PYTHONPATH``.  The wrappers count, per party, the thread
CPU seconds (``time.thread_time``) of

* decryptions (``PrivateKey.decrypt_half``, ``decrypt_halves``: a CRT half, or both interleaved), split into the emission blocks and the
  induction rounds by the caller's thread pool;
* obfuscators made (``raw_encrypt`` of the pool's maker: the fixed-base r^n), ahead or inline;
* Bob's multi-exponentiations: the emission blocks' rows (``multi_exp_rows``: the calling thread's share;
  the engine's own threads, which end with the call, are "threads that ended meanwhile" in the CPU by
  thread) and the induction's weighted sums (``logsum._job_product``);
* encryptions and re-randomisations with a pooled obfuscator (one multiplication each);
* (de)serialisation of ciphertext vectors (``EncryptedVector.to_proto`` / ``from_proto``);
* ``Channel.send`` on the event loop (protobuf, the journal, gRPC's hand-over) and the wall time spent
  waiting in ``Channel.recv``;

and each party's whole online phase: wall, the process's CPU, the event-loop thread's CPU, the CPU of
every thread (``/proc``); the wall time of each leg of every induction round (Alice's turn and its
decryptions, the terms in transit, Bob's turn and his weighted sums, the sums in transit), from both
parties' marks on one clock.  What the wrappers do not name is "other" (Python protocol code, gRPC and
TLS threads, the event loop).  The wrappers cost about a microsecond a call (thousands of calls: a few
ms).  ``--param NAME=JSON`` sets a session parameter (e.g. ``groups=2``).

    PYTHONPATH=. .venv/bin/python bench/keyword_profile.py --sessions 2 [--json out.json] [--cprofile 25]
    PYTHONPATH=. .venv/bin/python bench/keyword_profile.py --workload speaker-verify --param 'key_kind="subgroup"' \\
        -- --models /tmp/spkc/speakers.npz --wav /tmp/spkc/enrolled/spk02/test/u09.wav --claim spk02

The parties run the tree named first on ``PYTHONPATH`` (another checkout, to compare two trees with this
script), from that tree's directory.

Prints a markdown table per session (cold, then warm).  The host is shared: read the load beside it.
``--cprofile N`` also runs cProfile (on thread CPU time) on each party's event-loop thread during the
online phase and prints its N functions with the most own time: what "other" is made of.  It slows the
event loop (its own cost lands there), so read the tables of a run without it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "SMCDP_KEYWORD_PROFILE"

SITE = """\
import os, sys
if os.environ.get({env!r}):
    sys.path.insert(0, {bench!r})
    import keyword_profile
    keyword_profile.install(os.environ[{env!r}])
"""


# =============================================================================== inside a party process
def install(out_dir: str) -> None:
    """Wrap the hot functions of this process; each ForwardAlice/ForwardBob.run writes its figures."""
    import threading
    import time

    from smcdp.crypto import obfuscation, paillier
    from smcdp.crypto.vector import EncryptedVector
    from smcdp.net import channel
    from smcdp.primitives import logsum
    from smcdp.protocols import secure_forward as sf

    lock = threading.Lock()
    acc: dict[str, list[float]] = {}

    def add(name: str, cpu: float, wall: float) -> None:
        with lock:
            a = acc.setdefault(name, [0, 0.0, 0.0])
            a[0] += 1
            a[1] += cpu
            a[2] += wall

    def timed(name_of, fn):
        def wrapper(*args, **kw):
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                add(name_of(args) if callable(name_of) else name_of, time.thread_time() - c0, time.perf_counter() - w0)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    def atimed(name, fn):
        async def wrapper(*args, **kw):
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return await fn(*args, **kw)
            finally:
                add(name, time.thread_time() - c0, time.perf_counter() - w0)

        return wrapper

    def pool_name(args) -> str:
        th = threading.current_thread().name
        if "obf" in th:
            return "obfuscators made ahead"
        return "obfuscators made inline (stock empty)"

    _tls = threading.local()

    def decrypt_name(args) -> str:
        return f"decryptions ({'emission blocks' if getattr(_tls, 'emission', False) else 'induction'})"

    paillier.PrivateKey.decrypt_half = timed(decrypt_name, paillier.PrivateKey.decrypt_half)
    paillier.PrivateKey.decrypt_halves = timed(decrypt_name, paillier.PrivateKey.decrypt_halves)
    paillier.PrivateKey.raw_encrypt = timed(pool_name, paillier.PrivateKey.raw_encrypt)
    paillier.PublicKey.raw_encrypt = timed(pool_name, paillier.PublicKey.raw_encrypt)
    obfuscation.ObfuscatorPool.encrypt = timed("encryptions (pooled obfuscator)", obfuscation.ObfuscatorPool.encrypt)
    if hasattr(obfuscation.ObfuscatorPool, "encrypt_many"):  # since 0c3c462: a tree before it has none
        obfuscation.ObfuscatorPool.encrypt_many = timed(
            "encryptions (pooled obfuscator, batches)", obfuscation.ObfuscatorPool.encrypt_many
        )
    obfuscation.ObfuscatorPool.rerandomize = timed("re-randomisations (pooled)", obfuscation.ObfuscatorPool.rerandomize)
    # the calling thread's CPU only: the engine shares the rows with threads of its own, which end with the
    # call -- their CPU shows as "threads that ended" in the CPU by thread
    sf.multi_exp_rows = timed("multi-exp: emission rows (calling thread)", sf.multi_exp_rows)
    logsum._job_product = timed("multi-exp: induction sums", logsum._job_product)
    # the mixture LOGSUM's weighted sums in the spread layout (speaker models): one multi_exp_rows a chunk
    logsum.multi_exp_rows = timed("multi-exp: mixture sums (calling thread)", logsum.multi_exp_rows)
    EncryptedVector.to_proto = timed("serialise ciphertexts", EncryptedVector.to_proto)
    EncryptedVector.from_proto = classmethod(  # type: ignore[method-assign]
        timed("parse + check ciphertexts", EncryptedVector.from_proto.__func__)
    )
    # the induction's critical path: when each round's messages are sent and received (perf_counter is
    # CLOCK_MONOTONIC, one clock for both processes on this host), and the wall of each round's decryption
    # (Alice) and weighted sums (Bob)
    marks: list[tuple[str, str, float]] = []  # (event, round, time)

    def round_of(tag: str) -> str | None:
        parts = tag.split("/")  # …/e/<round>/<group> and …/u/<round>/<group>
        return f"{parts[-2]}/{parts[-1]}" if len(parts) >= 3 and parts[-3] in ("e", "u") else None

    send = atimed("Channel.send (event loop)", channel.Channel.send)

    async def send_wrapper(self, to, tag, msg):
        r = round_of(tag)
        if r is not None:
            marks.append((f"send {tag.split('/')[-3]}", r, time.perf_counter()))
        return await send(self, to, tag, msg)

    channel.Channel.send = send_wrapper

    recv = channel.Channel.recv

    async def recv_wrapper(self, frm, tag, msg_type, timeout=None):
        w0 = time.perf_counter()
        c0 = time.thread_time()
        try:
            return await recv(self, frm, tag, msg_type, timeout)
        finally:
            w1 = time.perf_counter()
            kind = tag.split("/")[2] if tag.count("/") >= 2 else tag
            add(f"recv wait {kind}", time.thread_time() - c0, w1 - w0)
            r = round_of(tag)
            if r is not None:
                marks.append((f"recv {tag.split('/')[-3]}", r, w1))
            elif tag.count("/") >= 2 and tag.split("/")[-2] == "q":  # an emission block's results
                marks.append(("recv q", tag.split("/")[-1], w1))

    channel.Channel.recv = recv_wrapper

    def spans(name, fn):
        """Record the wall span of an async call made by a round (decryptions, weighted sums)."""

        async def wrapper(*args, **kw):
            w0 = time.perf_counter()
            try:
                return await fn(*args, **kw)
            finally:
                marks.append((name + " start", "", w0))
                marks.append((name + " end", "", time.perf_counter()))

        return wrapper

    from smcdp.crypto.threads import CryptoThreads

    # the emission blocks decrypt through EmissionThreads below, which does not call this method
    CryptoThreads.adecrypt_signed = spans("decrypt", CryptoThreads.adecrypt_signed)
    logsum.aweighted_sums = spans("weighted sums", logsum.aweighted_sums)

    # decryptions of emission blocks: the threads a block's work runs on (sf._threads_for) are handed out
    # behind a proxy whose adecrypt_signed marks its jobs, so concurrent blocks and the rounds cannot mix
    from smcdp.crypto import threads as cthreads

    def emission(job_fn):
        def marked(job):
            _tls.emission = True
            try:
                return job_fn(job)
            finally:
                _tls.emission = False

        return marked

    class EmissionThreads:
        def __init__(self, threads):
            self._threads = threads

        def __getattr__(self, name):
            return getattr(self._threads, name)

        async def adecrypt_signed(self, sk, cts):  # the jobs CryptoThreads.adecrypt_signed runs, marked
            if cthreads._paired(sk, cts):
                pairs = await self._threads.amap(emission(cthreads._both), [(sk, c) for c in cts])
                return cthreads._combine_pairs(sk, pairs)
            return cthreads._combine(
                sk, await self._threads.amap(emission(cthreads._half), cthreads._half_jobs(sk, cts))
            )

    threads_for = sf._threads_for
    sf._threads_for = lambda role, block: EmissionThreads(threads_for(role, block))

    profile_loop = bool(os.environ.get(ENV + "_CPROFILE"))

    tick = os.sysconf("SC_CLK_TCK")

    def thread_cpu() -> dict[str, float]:
        """CPU seconds of this process's threads so far, summed by name (digits dropped: one pool, one row)."""
        out: dict[str, float] = {}
        names = {t.native_id: t.name for t in threading.enumerate()}
        main = threading.main_thread().native_id
        for task in Path("/proc/self/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:  # the thread ended meanwhile
                continue
            tid = int(task.name)
            name = "event loop (main)" if tid == main else names.get(tid, stat[stat.index("(") + 1 : stat.rindex(")")])
            name = name.split("_")[0] if name.startswith("ThreadPoolExecutor") else name
            fields = stat[stat.rindex(")") + 2 :].split()
            key = "".join(ch for ch in name if not ch.isdigit()).rstrip("-_ (") or name
            out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        return out

    def wrap_run(cls, role):
        run = cls.run

        async def profiled_run(self, *args, **kw):
            with lock:
                acc.clear()
                marks.clear()
            loop_thread = threading.get_ident()
            prof = None
            if profile_loop:
                import cProfile

                prof = cProfile.Profile(time.thread_time)
                prof.enable()
            threads0 = thread_cpu()
            w0, c0, l0 = time.perf_counter(), time.process_time(), time.thread_time()
            frames = 0
            try:
                res = await run(self, *args, **kw)
                frames = int(getattr(res, "frames", 0))
                return res
            finally:
                wall, cpu, loop_cpu = time.perf_counter() - w0, time.process_time() - c0, time.thread_time() - l0
                threads1 = thread_cpu()
                by_thread = {k: v - threads0.get(k, 0.0) for k, v in threads1.items()}
                # threads that started and ended within the run (the engine's row-sharing threads) are in
                # no snapshot: what the process used beyond the live threads' deltas
                by_thread["threads that ended meanwhile"] = cpu - sum(by_thread.values())
                if prof is not None:
                    prof.disable()
                    prof.dump_stats(str(Path(out_dir) / f"{role}-{os.getpid()}-{int(time.time() * 1e6)}.pstats"))
                with lock:
                    rows = {k: list(v) for k, v in acc.items()}
                    events = list(marks)
                out = {
                    "role": role,
                    "pid": os.getpid(),
                    "t": time.time(),
                    "wall": wall,
                    "frames": frames,
                    "cpu": cpu,
                    "event_loop_cpu": loop_cpu,
                    "loop_thread": loop_thread,
                    "online": {k: v for k, v in self.online.items() if isinstance(v, (int, float))},
                    "rows": rows,
                    "marks": events,
                    "threads": {k: v for k, v in by_thread.items() if v > 0},
                }
                path = Path(out_dir) / f"{role}-{os.getpid()}-{int(time.time() * 1e6)}.json"
                path.write_text(json.dumps(out))

        cls.run = profiled_run

    wrap_run(sf.ForwardAlice, "alice")
    wrap_run(sf.ForwardBob, "bob")


# =============================================================================== the driver
def table(prof: dict) -> str:
    T = prof.get("frames") or 98  # a run that failed counted none: the keyword fixture's
    lines = [
        f"**{prof['role']}**: online (forward run) {prof['wall']:.2f} s wall, process CPU {prof['cpu']:.2f} s, "
        f"event-loop thread CPU {prof['event_loop_cpu']:.2f} s",
        "",
        f"| what | calls | thread CPU s | wall s | per frame ({T}) ms CPU |",
        "|---|---|---|---|---|",
    ]
    named = 0.0
    for name, (n, cpu, wall) in sorted(prof["rows"].items(), key=lambda kv: -kv[1][1]):
        if name.startswith("recv wait"):
            continue
        named += cpu  # leaf functions: no row holds another (Channel.send holds no serialisation)
        lines.append(f"| {name} | {int(n)} | {cpu:.3f} | {wall:.3f} | {cpu / T * 1e3:.2f} |")
    lines.append(f"| other (not named above) | | {prof['cpu'] - named:.3f} | | {(prof['cpu'] - named) / T * 1e3:.2f} |")
    if prof.get("threads"):
        lines.append("")
        lines.append(
            "CPU by thread (s, /proc, 10 ms ticks): "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(prof["threads"].items(), key=lambda kv: -kv[1]))
        )
    waits = {k: v for k, v in prof["rows"].items() if k.startswith("recv wait")}
    if waits:
        lines.append("")
        lines.append(
            "waiting in recv (wall, overlapping): "
            + ", ".join(
                f"{k[10:]} {v[2]:.2f} s / {int(v[0])}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1][2])
            )
        )
    return "\n".join(lines)


def critical_path(alice: dict, bob: dict) -> str:
    """Per induction round (one frame at m = 1): the wall time of each leg of the round trip, from both
    parties' marks on one clock -- Alice's turn (from Bob's sums received to her next terms sent: the round's
    decryption, then (L), (E), encryptions, serialisation), the terms' transit (gRPC, TLS, the journal, both
    event loops), Bob's turn (parse, the weighted sums, serialisation) and the sums' transit."""

    def index(marks: list, event: str) -> dict[str, float]:
        return {r: t for e, r, t in marks if e == event}

    a_send, a_recv = index(alice["marks"], "send e"), index(alice["marks"], "recv u")
    b_recv, b_send = index(bob["marks"], "recv e"), index(bob["marks"], "send u")

    def spans(marks: list, name: str) -> list[tuple[float, float]]:
        starts = sorted(t for e, _, t in marks if e == name + " start")
        ends = sorted(t for e, _, t in marks if e == name + " end")
        return list(zip(starts, ends))

    dec, ws = spans(alice["marks"], "decrypt"), spans(bob["marks"], "weighted sums")

    def inside(sp: list[tuple[float, float]], lo: float, hi: float) -> float:
        return sum(min(b, hi) - max(a, lo) for a, b in sp if a < hi and b > lo)

    # keys "<round>/<group>": with groups > 1 every group's rounds are legs of their own
    def key(r: str) -> tuple[int, int]:
        s, g = r.split("/")
        return int(s), int(g)

    rounds = sorted(key(r) for r in a_send if r in b_recv and r in b_send and r in a_recv)
    legs: dict[str, list[float]] = {
        k: [] for k in ("transit e", "bob turn", "bob sums", "transit u", "alice turn", "alice dec")
    }
    for r, g in rounds:
        k = f"{r}/{g}"
        legs["transit e"].append(b_recv[k] - a_send[k])
        legs["bob turn"].append(b_send[k] - b_recv[k])
        legs["bob sums"].append(inside(ws, b_recv[k], b_send[k]))
        legs["transit u"].append(a_recv[k] - b_send[k])
        nxt = f"{r + 1}/{g}"
        if nxt in a_send:
            legs["alice turn"].append(a_send[nxt] - a_recv[k])
            legs["alice dec"].append(inside(dec, a_recv[k], a_send[nxt]))
    if not rounds:
        return "(no induction rounds recorded)"
    first = min(a_send[f"{r}/{g}"] for r, g in rounds)
    last = max(a_recv[f"{r}/{g}"] for r, g in rounds)
    n_rounds = len({r for r, _ in rounds})

    def row(name: str, key: str) -> str:
        v = sorted(legs[key])
        if not v:
            return f"| {name} | — | — | — |"
        return f"| {name} | {v[len(v) // 2] * 1e3:.1f} | {sum(v) / len(v) * 1e3:.1f} | {sum(v):.2f} |"

    # an emission block's results (as they arrive, before Alice decrypts them) against the round that needs
    # its first frame f: at m = 1 the round f - 1 -> f, which Alice starts once the sums of round f - 2 are in
    q = {int(b): t for e, b, t in alice["marks"] if e == "recv q"}
    blocks = []
    for b in sorted(q):
        first_frame = 20 * b  # the fixture's blocks: 20 frames (a product ciphertext's slots)
        need = a_recv.get(f"{first_frame - 2}/0") if first_frame >= 2 else None
        if need is not None:
            blocks.append(f"block {b}: {(q[b] - need) * 1e3:+.0f} ms")
    waits = (
        [
            "",
            "an emission block's results received (before their decryption) relative to the rounds reaching it "
            "(+: after): " + ", ".join(blocks),
        ]
        if blocks
        else []
    )
    return "\n".join(
        [
            f"induction: {n_rounds} rounds ({len(rounds)} round trips), first terms sent to last sums received "
            f"{last - first:.2f} s ({(last - first) / n_rounds * 1e3:.1f} ms a round)",
            "",
            "| leg of a round | median ms | mean ms | total s |",
            "|---|---|---|---|",
            row("Alice's turn (sums received → next terms sent)", "alice turn"),
            row("  of which her decryption (wall)", "alice dec"),
            row("terms in transit (send → Bob's recv returns)", "transit e"),
            row("Bob's turn (terms received → sums sent)", "bob turn"),
            row("  of which his weighted sums (wall)", "bob sums"),
            row("sums in transit (send → Alice's recv returns)", "transit u"),
            *waits,
        ]
    )


def top_functions(path: Path, n: int) -> str:
    """The ``n`` functions of a pstats file with the most own time, as pstats prints them."""
    import io
    import pstats

    buf = io.StringIO()
    pstats.Stats(str(path), stream=buf).sort_stats("tottime").print_stats(n)
    text = buf.getvalue()
    return text[text.find("   ncalls") :].rstrip() if "   ncalls" in text else text.rstrip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--gap", type=float, default=3.0)
    ap.add_argument(
        "--workload",
        default="keyword",
        help="session_driver.py's workload: keyword, or speaker-verify / speaker-identify (the secure forward "
        "algorithm's mixture step), with their driver options after --",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--param", action="append", default=[], metavar="NAME=JSON", help="a session parameter (e.g. groups=2)"
    )
    ap.add_argument(
        "--cprofile",
        type=int,
        default=0,
        metavar="N",
        help="also profile each party's event-loop thread (cProfile, thread CPU) and print its top N functions",
    )
    ap.add_argument(
        "driver", nargs="*", help="after --: more session_driver.py options (--models, --wav, --claim, ...)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="smcdp-kwprof-") as d:
        site = Path(d) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITE.format(env=ENV, bench=str(Path(__file__).resolve().parent)))
        out = Path(d) / "out"
        out.mkdir()
        env = dict(os.environ, SMCDP_PROGRESS="off")
        env[ENV] = str(out)
        if args.cprofile:
            env[ENV + "_CPROFILE"] = "1"
        # the tree measured: the first entry of the caller's PYTHONPATH (as session_driver.py takes it), else this
        # one -- ROOT first would have measured this checkout whatever the caller named
        tree = Path(env["PYTHONPATH"].split(os.pathsep)[0]).resolve() if env.get("PYTHONPATH") else ROOT
        env["PYTHONPATH"] = os.pathsep.join([str(tree), str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "session_driver.py"),
                "--workload",
                args.workload,
                "--sessions",
                str(args.sessions),
                "--gap",
                str(args.gap),
                *(x for p in args.param for x in ("--param", p)),
                *args.driver,
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=tree,
        )
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 2
        driver = json.loads(proc.stdout.strip().splitlines()[-1])
        profs = [json.loads(p.read_text()) for p in out.glob("*.json")]
        stats = {p.name: top_functions(p, args.cprofile) for p in sorted(out.glob("*.pstats"))}
    files = sorted(profs, key=lambda p: (p["role"], p["t"]))
    by_role: dict[str, list[dict]] = {}
    for p in files:
        by_role.setdefault(p["role"], []).append(p)
    for i, s in enumerate(driver["sessions"]):
        print(
            f"\n### session {i + 1} ({'cold' if i == 0 else 'warm'}): {s['seconds']:.2f} s, online "
            f"{s['online_seconds']:.2f} s, CPU {s['cpu_seconds']}, load {driver['load']:.1f}\n"
        )
        for role in ("alice", "bob"):
            if i < len(by_role.get(role, [])):
                print(table(by_role[role][i]))
                print()
        if i < len(by_role.get("alice", [])) and i < len(by_role.get("bob", [])):
            print(critical_path(by_role["alice"][i], by_role["bob"][i]))
            print()
    for name, text in stats.items():
        print(f"\n#### event-loop thread of {name.split('-')[0]} (cProfile, thread CPU, by own time)\n")
        print("```\n" + text + "\n```")
    if args.json:
        args.json.write_text(json.dumps({"driver": driver, "profiles": files}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
