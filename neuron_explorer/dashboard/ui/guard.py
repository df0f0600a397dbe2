"""What every callback body shares: the error its input can raise and the decorator that turns it
into the page's #error message, so that no input from a page can crash the server.

Must not: query the run or draw.
"""

from __future__ import annotations

from ...errors import NeuronExplorerError


class CallbackInputError(NeuronExplorerError):
    """Input a callback cannot use (malformed relayout or click data, unknown ids)."""


def guard(n_out: int, *, only_in_mode: str | None = None, background: tuple[str, ...] = ()):
    """Decorate a callback body: its outputs plus the #error message ('' on success).

    A success triggered only by one of the `background` inputs (a refresh the page makes by itself,
    such as the analysis finishing) leaves the error line as it is: the message a person's last
    action produced stays until their next action.

    A NeuronExplorerError (bad input from the page) becomes the message and leaves the other
    outputs unchanged, so no input from a page can crash the server. With `only_in_mode`, the
    first input is the view mode and nothing is computed unless it is that mode.
    """
    from dash import ctx, no_update

    def deco(fn):
        def wrapped(*args):
            if only_in_mode is not None:
                mode, *args = args
                if mode != only_in_mode:
                    return (*([no_update] * n_out), no_update)
            try:
                out = fn(*args)
                refresh = bool(background) and ctx.triggered_id in background
                return (*out, no_update if refresh else "")
            except NeuronExplorerError as e:
                return (*([no_update] * n_out), f"⚠ {e}")
        return wrapped
    return deco
