"""`brokerctl bind`, `unbind` and `bindings`: which session a conversation talks to
(the `route.*` ops)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table

Channel = Annotated[str, typer.Argument(help="The adapter's channel, e.g. telegram.")]
PeerKind = Annotated[str, typer.Argument(help="dm or group.")]
PeerId = Annotated[str, typer.Argument(help="The conversation's peer id (for a DM, the sender).")]
Thread = Annotated[str | None, typer.Option("--thread", help="The thread within the peer.")]


@app.command()
def bind(
    channel: Channel,
    peer_kind: PeerKind,
    peer_id: PeerId,
    session: Annotated[str, typer.Argument(help="A session of the same person (label or alias).")],
    thread: Thread = None,
) -> None:
    """Send a conversation's messages to SESSION from now on (a fork, say); its replies
    come back to the conversation."""
    call(
        "route.bind",
        lambda d: console.print(f"{channel} {peer_kind} {peer_id}: now talks to {d['session']}"),
        channel=channel,
        peer_kind=peer_kind,
        peer_id=peer_id,
        thread_id=thread,
        session=session,
    )


@app.command()
def unbind(channel: Channel, peer_kind: PeerKind, peer_id: PeerId, thread: Thread = None) -> None:
    """Undo `bind`: the conversation's messages go where its route leads again."""
    call(
        "route.unbind",
        lambda d: console.print(
            f"{channel} {peer_kind} {peer_id}: no longer bound to {d['session']}"
        ),
        channel=channel,
        peer_kind=peer_kind,
        peer_id=peer_id,
        thread_id=thread,
    )


@app.command()
def bindings(
    session: Annotated[str | None, typer.Argument(help="Only bindings to this session.")] = None,
) -> None:
    """The conversations bound to a session other than their route's."""

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            "bindings",
            ["channel", "peer kind", "peer id", "thread", "session", "by"],
            [
                [
                    r["channel"],
                    r["peer_kind"],
                    r["peer_id"],
                    r["thread_id"],
                    r["session"],
                    r["bound_by"],
                ]
                for r in rows
            ],
        )

    call("route.list", render, session=session)
