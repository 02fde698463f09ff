"""Server-rendered HTML of the console (docs/operations.md, 'Pages'): no JavaScript, no CDN, one
stylesheet served by the party.  Every value goes through :func:`html.escape` (session ids, peer names
and error messages come from peers)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from smcdp.states import PENDING_APPROVAL, SessionState

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1b1f23;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:baseline}
nav{display:flex;gap:16px}
header h1{font-size:17px;margin:0}header a{color:#c9d1d9;text-decoration:none}header a.on{color:#fff;
font-weight:600;border-bottom:2px solid #fff}main{padding:16px 20px}
table{border-collapse:collapse;background:#fff;width:100%;margin:8px 0 20px}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eaeef2;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.st{padding:1px 6px;border-radius:8px;font-size:12px;white-space:nowrap}
.succeeded,.up,.ok{background:#dafbe1;color:#116329}.failed,.down,.bad{background:#ffebe9;color:#a40e26}
.running,.prepared{background:#ddf4ff;color:#0550ae}.pending{background:#fff8c5;color:#7d4e00}
.unknown{background:#eaeef2;color:#57606a}small,.muted{color:#57606a}code{font-size:12px}
.kv td:first-child{width:180px;font-weight:600}footer{padding:8px 20px;color:#57606a;font-size:12px}
.warn{background:#ffebe9;color:#a40e26;border:1px solid #ff8182;padding:6px 10px;font-weight:600}
"""

NAV = (
    ("/", "Sessions"),
    ("/peers", "Peers"),
    ("/budgets", "Privacy budgets"),
    ("/audit", "Audit log"),
    ("/metrics", "Metrics"),
)


def e(v: Any) -> str:
    if v is None:
        return ""
    return html.escape(str(v), quote=True)


def page(
    title: str, party: str, active: str, body: str, refresh: float, generated: str, warnings: Iterable[str] = ()
) -> str:
    nav = "".join(f'<a href="{href}"{" class=on" if href == active else ""}>{e(label)}</a>' for href, label in NAV)
    body = "".join(f'<p class="warn">!!! {e(w)}</p>' for w in warnings) + body
    meta = f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh > 0 else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{e(title)} — smcdp {e(party)}</title><link rel="stylesheet" href="/static/console.css">'
        f"</head><body><header><h1>smcdp · party {e(party)}</h1><nav>{nav}</nav>"
        f"</header><main><h2>{e(title)}</h2>{body}</main><footer>read-only console · generated {e(generated)}"
        f"{f' · refreshes every {int(refresh)} s' if refresh > 0 else ''}</footer></body></html>"
    )


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], empty: str = "none") -> str:
    rows = list(rows)
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    if not rows:
        return f'<table><tr>{head}</tr><tr><td colspan="{len(list(headers)) or 1}" class="muted">{e(empty)}</td></tr></table>'
    return f"<table><tr>{head}</tr>" + "".join("<tr>" + "".join(r) + "</tr>" for r in rows) + "</table>"


def td(v: Any, cls: str = "") -> str:
    return f'<td class="{cls}">{e(v)}</td>' if cls else f"<td>{e(v)}</td>"


def raw_td(html_text: str) -> str:
    return f"<td>{html_text}</td>"


def state_badge(state: str | None, rnd: Any = None, step: str = "", waiting_for: str | None = None) -> str:
    s = state or "unknown"
    cls = {
        **{
            st.value: st.value
            for st in (SessionState.SUCCEEDED, SessionState.FAILED, SessionState.RUNNING, SessionState.PREPARED)
        },
        PENDING_APPROVAL: "pending",
    }.get(s, "unknown")
    extra = ""
    if s == SessionState.RUNNING and rnd is not None:
        extra = f" · round {e(rnd)}" + (f" · {e(step)}" if step else "")
    if waiting_for and (s == SessionState.PREPARED or s == PENDING_APPROVAL):  # and whose operator it waits for
        extra += f' · <span class="st pending">waiting for approval at {e(waiting_for)}</span>'
    return f'<span class="st {cls}">{e(s)}</span>{extra}'


def human_bytes(n: int | None) -> str:
    if n is None:
        return ""
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return str(n)


def duration(sec: Any) -> str:
    if not isinstance(sec, (int, float)):
        return ""
    sec = float(sec)
    if sec < 60:
        return f"{sec:.1f} s"
    if sec < 3600:
        return f"{int(sec // 60)} min {int(sec % 60)} s"
    return f"{int(sec // 3600)} h {int(sec % 3600 // 60)} min"


def traffic_cell(traffic: dict) -> str:
    if not traffic:
        return '<span class="muted">—</span>'
    return "<br>".join(
        f"{e(p)}: ↑ {e(human_bytes(t['sent']))} ↓ {e(human_bytes(t['received']))}" for p, t in sorted(traffic.items())
    )


def error_text(err: Any) -> str:
    if not err:
        return ""
    if isinstance(err, dict):
        parts = [err.get("code"), err.get("message")]
        origin = err.get("origin")
        txt = ": ".join(str(p) for p in parts if p)
        claimed = err.get("reported_culprit")
        if origin and claimed and claimed != origin:  # a peer's word this party did not confirm
            return f"{txt} (origin {origin}, who reports {claimed} as the culprit: not confirmed here)"
        return f"{txt} (origin {origin})" if origin else txt
    return str(err)


def roles_text(roles: dict | None) -> str:
    return ", ".join(f"{r}={p}" for r, p in sorted((roles or {}).items()))


def sessions_body(sessions: list[dict]) -> str:
    rows = []
    for s in sessions:
        sid = s["session_id"]
        rows.append(
            [
                raw_td(f'<a href="/sessions/{quote(sid, safe="")}"><code>{e(sid)}</code></a>'),
                td(s.get("protocol")),
                td(roles_text(s.get("roles"))),
                td(s.get("initiator")),
                raw_td(
                    state_badge(s.get("state"), s.get("round"), s.get("step") or "", s.get("waiting_for"))
                    + (f"<br><small>{e(error_text(s.get('error')))}</small>" if s.get("error") else "")
                ),
                td(s.get("started_at")),
                td(duration(s.get("seconds")), "num"),
                raw_td(traffic_cell(s.get("traffic") or {})),
            ]
        )
    counts: dict[str, int] = {}
    for s in sessions:
        counts[s.get("state") or "unknown"] = counts.get(s.get("state") or "unknown", 0) + 1
    summary = " · ".join(f"{e(k)}: {v}" for k, v in sorted(counts.items())) or "no sessions yet"
    return f"<p>{summary}</p>" + table(
        [
            "Session",
            "Protocol",
            "Roles",
            "Initiator",
            "State",
            "Started (UTC)",
            "Duration",
            "Bytes per peer (↑ sent ↓ received)",
        ],
        rows,
        "no sessions yet",
    )


def session_body(s: dict) -> str:
    kv = [
        ("Session", f"<code>{e(s['session_id'])}</code>"),
        ("Protocol", e(s.get("protocol"))),
        ("Roles", e(roles_text(s.get("roles")))),
        ("This party's role", e(s.get("role"))),
        ("Initiator", e(s.get("initiator"))),
        ("State", state_badge(s.get("state"), s.get("round"), s.get("step") or "", s.get("waiting_for"))),
        ("Error", e(error_text(s.get("error")))),
        ("Started (UTC)", e(s.get("started_at"))),
        ("Finished (UTC)", e(s.get("finished_at"))),
        ("Duration", e(duration(s.get("seconds")))),
        ("Restarts", e(s.get("restarts"))),
        ("Seeded", e(s.get("seeded"))),
    ]
    if s.get("kind") == "proposal":
        kv.append(("Approval expires", e(s.get("expires_at"))))
    body = '<table class="kv">' + "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in kv) + "</table>"
    traffic = s.get("traffic") or {}
    body += "<h3>Traffic</h3>" + table(
        ["Peer", "Bytes sent", "Bytes received"],
        [
            [td(p), td(human_bytes(t["sent"]), "num"), td(human_bytes(t["received"]), "num")]
            for p, t in sorted(traffic.items())
        ],
        "no messages yet",
    )
    body += "<h3>Timeline</h3>" + table(
        ["Time (UTC)", "Event", "Details"],
        [[td(ev.get("time")), td(ev.get("event")), td(details(ev))] for ev in s.get("timeline") or []],
        "no events recorded",
    )
    return body


def details(entry: dict) -> str:
    return " ".join(
        f"{k}={json.dumps(v, ensure_ascii=True, sort_keys=True)}"
        for k, v in sorted(entry.items())
        if k not in ("seq", "time", "event", "session", "prev", "party")
    )


def peers_body(peers: list[dict], own: dict, name: str) -> str:
    rows = []
    for h in peers:
        badge = (
            '<span class="st unknown">not probed</span>'
            if h["up"] is None
            else f'<span class="st {"up" if h["up"] else "down"}">{"up" if h["up"] else "down"}</span>'
        )
        cert = (
            e(h.get("cert_subject"))
            if h.get("cert_subject")
            else f'<span class="muted">{e(h.get("cert_error") or "—")}</span>'
        )
        rows.append(
            [
                td(h["name"]),
                raw_td(f"<code>{e(h['address'])}</code>"),
                raw_td(f"{badge} <small>{e(h['status'])}</small>"),
                td("" if h["rtt_ms"] is None else f"{h['rtt_ms']:.1f} ms", "num"),
                raw_td(cert),
                td(h.get("cert_issuer")),
                td(f"{h['cert_not_after']} ({h['cert_days_left']:.0f} days)" if h.get("cert_not_after") else ""),
                td(h.get("probed_at")),
            ]
        )
    own_t = (
        '<table class="kv">' + f"<tr><td>Party</td><td>{e(name)}</td></tr>"
        f"<tr><td>Certificate</td><td>{e(own.get('cert_subject'))}</td></tr>"
        f"<tr><td>Issuer</td><td>{e(own.get('cert_issuer'))}</td></tr>"
        f"<tr><td>Expires</td><td>{e(own.get('cert_not_after'))} ({own.get('cert_days_left', 0):.0f} days)</td></tr>"
        "</table>"
    )
    return (
        "<h3>This party</h3>"
        + own_t
        + "<h3>Peers</h3>"
        + table(
            [
                "Peer",
                "Address",
                "Health (grpc.health.v1)",
                "Round trip",
                "Certificate subject",
                "Issuer",
                "Certificate expires (UTC)",
                "Last probe (UTC)",
            ],
            rows,
            "no peers configured",
        )
    )


def budgets_body(budgets: list[dict]) -> str:
    if not budgets:
        return '<p class="muted">This party has no [budget]: no privacy ledger to show.</p>'
    out = []
    for b in budgets:
        out.append(f"<h3>Dataset <code>{e(b['dataset'])}</code>{' (this party’s data)' if b['mine'] else ''}</h3>")
        out.append(
            table(
                ["", "ε", "δ"],
                [
                    [td("total"), td(b["epsilon"], "num"), td(b["delta"], "num")],
                    [td("spent"), td(b["spent_epsilon"], "num"), td(b["spent_delta"], "num")],
                    [td("reserved"), td(b["reserved_epsilon"], "num"), td(b["reserved_delta"], "num")],
                    [td("remaining"), td(b["remaining_epsilon"], "num"), td(b["remaining_delta"], "num")],
                ],
            )
        )
        out.append(f"<p><small>composition rule: {e(b['rule'])}</small></p>")
        rows = []
        for c in b["charges"]:
            sess = (
                f'<a href="/sessions/{quote(c["session"], safe="")}"><code>{e(c["session"])}</code></a>'
                if c["session"]
                else '<span class="muted">(direct spend)</span>'
            )
            rows.append(
                [
                    td(c["id"], "num"),
                    raw_td(sess),
                    td(c["state"]),
                    td(c["epsilon"], "num"),
                    td(c["delta"], "num"),
                    td(c["time"]),
                    td(c["settled_at"]),
                    td(c["reason"] or c["note"]),
                ]
            )
        out.append(
            table(
                ["#", "Session", "State", "ε", "δ", "Recorded (UTC)", "Settled (UTC)", "Note"], rows, "no charges yet"
            )
        )
    return "".join(out)


def audit_body(audit: dict) -> str:
    v = audit["verification"]
    note = f" ({e(v.get('note'))})" if v.get("note") else ""
    bad = f" (first bad line {e(v.get('bad_line'))})" if v.get("bad_line") else ""
    if v.get("ok"):
        head = (
            f'<p><span class="st ok">verifies</span> {e(v.get("lines"))} lines, hash chain and head match'
            f"{note}. <small>head <code>{e(v.get('head'))}</code></small></p>"
        )
    else:
        head = f'<p><span class="st bad">does not verify</span> {e(v.get("problem"))}{bad}</p>'
    rows = [
        [
            td(x.get("seq"), "num"),
            td(x.get("time")),
            td(x.get("event")),
            raw_td(
                f'<a href="/sessions/{quote(str(x["session"]), safe="")}"><code>{e(x["session"])}</code></a>'
                if x.get("session")
                else ""
            ),
            td(details(x)),
        ]
        for x in reversed(audit["tail"])
    ]
    return head + table(["#", "Time (UTC)", "Event", "Session", "Details"], rows, "empty")
