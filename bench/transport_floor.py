"""What smcdp's transport adds to a protocol round trip, against bare gRPC in the same run (issue 42's profile).

Two measurements of the same exchange -- ``--rounds`` round trips of ``--bytes`` bytes each way between two
processes on loopback, mutual TLS:

* **bare gRPC** (the floor): one bidirectional ``grpc.aio`` stream between a client and an echo server
  process, raw bytes (no protobuf, no journal, no session), certificates as ``smcdp certs`` issues them;
* **smcdp**: ``bench/session_driver.py --workload pingpong`` -- two party processes as the demos start them
  (mTLS, journals on, the session's own event loop beside the server's, every message acknowledged after
  the journal's group commit), ``--sessions`` sessions, the first on cold processes.

Prints one JSON object: each side's milliseconds a round trip (median of its repetitions / warm sessions), the
CPU milliseconds a round trip of both processes, and smcdp's ratio to the floor.  docs/benchmarks.md
("Transport: a round trip") records a run and where the difference goes.

    PYTHONPATH=. .venv/bin/python bench/transport_floor.py [--rounds 1000] [--bytes 25000] [--sessions 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICE, METHOD = "bench.Echo", "Chat"


def _identity(b: bytes) -> bytes:
    return b


def make_certs(where: Path) -> None:
    """A deployment CA and one party certificate named ``localhost`` (client and server use), made as
    ``smcdp certs`` makes a party's (:mod:`smcdp.net.tls`), for both ends; the key file 0600."""
    from smcdp.net.tls import create_ca, issue_party_certificate, write_certificate, write_private_key

    ca_key, ca = create_ca("bench CA", days=1)
    leaf_key, leaf = issue_party_certificate(ca_key, ca, "localhost", days=1)
    write_certificate(where / "ca.pem", ca)
    write_certificate(where / "leaf.pem", leaf)
    write_private_key(where / "leaf.key", leaf_key)


def _material(where: Path) -> tuple[bytes, bytes, bytes]:
    return (where / "ca.pem").read_bytes(), (where / "leaf.pem").read_bytes(), (where / "leaf.key").read_bytes()


async def serve(where: Path, port: int) -> None:
    """The echo server: every message written on a call is written back on it."""
    import grpc
    from grpc import aio

    ca, crt, key = _material(where)
    server = aio.server()

    async def chat(requests, context):
        async for m in requests:
            yield m

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            METHOD: grpc.stream_stream_rpc_method_handler(
                chat, request_deserializer=_identity, response_serializer=_identity
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_secure_port(
        f"127.0.0.1:{port}", grpc.ssl_server_credentials([(key, crt)], root_certificates=ca, require_client_auth=True)
    )
    await server.start()
    print(port, flush=True)  # the port it listens on (0 asked for any free one): the client's
    await server.wait_for_termination()


async def bare_round_trips(where: Path, port: int, rounds: int, nbytes: int, repeats: int) -> list[float]:
    """Seconds of ``rounds`` round trips on one stream, ``repeats`` times (after one warm-up repetition)."""
    import grpc
    from grpc import aio

    ca, crt, key = _material(where)
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=crt)
    # the leaf is party localhost's certificate: checked against that party's identity name, as parties check
    from smcdp.net.tls import party_identity_name

    options = [("grpc.ssl_target_name_override", party_identity_name("localhost"))]
    async with aio.secure_channel(f"127.0.0.1:{port}", creds, options=options) as channel:
        await asyncio.wait_for(channel.channel_ready(), 20)
        call = channel.stream_stream(
            f"/{SERVICE}/{METHOD}", request_serializer=_identity, response_deserializer=_identity
        )()
        payload = b"\x5a" * nbytes
        out = []
        for rep in range(repeats + 1):
            t0 = time.perf_counter()
            for _ in range(rounds):
                await call.write(payload)
                if await call.read() != payload:
                    raise RuntimeError("the echo differs from what was sent")
            if rep:
                out.append(time.perf_counter() - t0)
        await call.done_writing()
    return out


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def bare(rounds: int, nbytes: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="smcdp-transport-floor-") as tmp:
        where = Path(tmp)
        make_certs(where)
        # the server binds a free port itself and prints it once it listens (no port picked here and raced for)
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(where), "--port", "0"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            if not line.strip().isdigit():
                raise RuntimeError("the echo server did not start")
            port, s0 = int(line), _cpu(server.pid)  # its CPU from when it listens, not its start-up
            c0 = time.process_time()
            secs = asyncio.run(bare_round_trips(where, port, rounds, nbytes, repeats))
            cpu = time.process_time() - c0 + _cpu(server.pid) - s0
        finally:
            server.terminate()
            server.wait(10)
    n = rounds * (repeats + 1)
    return {
        "ms_per_round_trip": round(1e3 * statistics.median(secs) / rounds, 3),
        "runs_ms": [round(1e3 * s / rounds, 3) for s in secs],
        "cpu_ms_per_round_trip": round(1e3 * cpu / n, 3),
    }


def smcdp_pingpong(rounds: int, nbytes: int, sessions: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "session_driver.py"),
        "--workload",
        "pingpong",
        "--sessions",
        str(sessions),
        "--gap",
        "1",
        "--param",
        f"rounds={rounds}",
        "--param",
        f"bytes={nbytes}",
    ]
    out = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    runs = out["sessions"]
    warm = runs[1:] or runs
    return {
        "ms_per_round_trip": round(statistics.median(s["ms_per_round_trip"] for s in warm), 3),
        "sessions_ms": [round(s["ms_per_round_trip"], 3) for s in runs],
        "cpu_ms_per_round_trip": round(1e3 * statistics.median(s["cpu_total"] for s in warm) / rounds, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--bytes", type=int, default=25_000, help="each way (keyword's induction round: 22-25 kB)")
    ap.add_argument("--repeats", type=int, default=3, help="bare gRPC: timed repetitions after a warm-up")
    ap.add_argument("--sessions", type=int, default=3, help="smcdp: sessions (the first cold; the median of the rest)")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        asyncio.run(serve(a.serve, a.port))
        return 0
    floor = bare(a.rounds, a.bytes, a.repeats)
    ours = smcdp_pingpong(a.rounds, a.bytes, a.sessions)
    print(
        json.dumps(
            {
                "rounds": a.rounds,
                "bytes_each_way": a.bytes,
                "bare_grpc": floor,
                "smcdp": ours,
                "ratio_wall": round(ours["ms_per_round_trip"] / floor["ms_per_round_trip"], 2),
                "ratio_cpu": round(ours["cpu_ms_per_round_trip"] / floor["cpu_ms_per_round_trip"], 2),
                "load_average": os.getloadavg()[0],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
