"""Instructions a turn of the daemon's context work, in process, counted by callgrind.

    .venv/bin/python -m bench.context_turns [--turns 1000] [--sessions 100]

What the daemon does for a turn's context, without the daemon around it (which
`bench.instructions` counts whole, moving by about 2% between runs): the input's
message (the turn's open step), `SessionContext.build` (the state record rendered and
counted, `assemble`), the title and outcome, and `SessionFacts.committed` (`facts_of`,
`advance`, the new history block). Each turn is a person's short message on one of
`--sessions` sessions in turn, echoed back, with the broker's `intent` and `llm`
events. Runs itself under valgrind for `--turns` and six times as many; prints the
difference over the extra turns, so start-up and imports cancel out
(docs/performance.md, "The per-turn cost of round 2's features").
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

from broker.context.session import SessionContext
from broker.context.tokens import TokenCounter
from broker.mailbox.session_facts import SessionFacts
from core import turn_events as te
from core.titles import outcome_line, turn_title
from ledger.port.records import ItemInfo, TurnRecord

COLLECTED = re.compile(r"==\d+== Collected : (\d+)")


def run_turns(turns: int, sessions: int) -> None:
    counter = TokenCounter()
    facts = [SessionFacts(SessionContext(counter)) for _ in range(sessions)]
    for t in range(turns):
        s = t % sessions
        session, label, turn_id = facts[s], f"dm:user-{s}", f"turn{t:010d}"
        ctx, text = session.ctx, f"t{t}: the quick brown fox"
        item = ItemInfo(
            f"item{t}", t, label, "person", "followup", "running", turn_id, None, "bench",
            f"t{t}", f"user-{s}", None, "dm", f"user-{s}", None, text,
        )  # fmt: skip
        inputs = [ctx.msg("user", text, None, turn_id)]
        plan = ctx.build(
            window=8192, reserve=1024, threshold=0.85, system=None,
            inputs=tuple(inputs), notes=(), label=label,
        )  # fmt: skip
        events = [
            ("intent", te.intent_payload([(f"t{t}", f"user-{s}", text)])),
            ("llm", te.llm_payload("echo", 40, 5, 0, "end")),
        ]
        reply = ctx.msg("assistant", text, turn_id=turn_id)
        rec = TurnRecord(
            turn_id=turn_id, session=label, parent_id=session.head, type="turn",
            status="completed", reason=None, error=None, output=text, engine="echo",
            model="echo", started_at=0, completed_at=1, prompt_tokens=40, completion_tokens=5,
            inputs=[item], item_status="done", events=events,
            outcome=outcome_line("completed", None, None),
        )  # fmt: skip
        rec.title, rec.title_source = turn_title([text], text, events, "turn")
        session.committed(rec, "thread", inputs, reply, "completed")
        if plan.compaction_due:  # not at the default sizes: keeps a long run's history bounded
            ctx.compacted("a summary", tuple(ctx.blocks[-4:]))


def counted(turns: int, sessions: int) -> int:
    cmd = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "bench.context_turns", "--run", str(turns),
        "--sessions", str(sessions),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    found = COLLECTED.search(out)
    if found is None:
        raise RuntimeError(f"no callgrind total:\n{out[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # the counted process
    args = parser.parse_args()
    if args.run is not None:
        run_turns(args.run, args.sessions)
        return
    short, long = counted(args.turns, args.sessions), counted(6 * args.turns, args.sessions)
    extra = 5 * args.turns
    print(f"{(long - short) / extra:,.0f} instructions a turn ({extra} turns counted)")


if __name__ == "__main__":
    main()
