"""The policy benchmark's own prompts (beside the five packaged ones), the held-out prompts
of the calibrated policy, and which are copy-heavy (the reply restates the prompt) and which
are prose."""

from __future__ import annotations

from pathlib import Path

OWN_PROMPTS = {
    "list_copy": (
        "Copy this shopping list exactly, one item per line, and add 'milk' at the end:\n"
        "apples\nbananas\ncarrots\ndried figs\neggs\nflour\ngreen beans\nhoney\n"
        "Italian parsley\njam\n"
    ),
    "rename_var": (
        "Rename the variable `total` to `subtotal` in this function and return the whole "
        "function:\n\ndef price(items, tax):\n    total = 0\n    for item in items:\n"
        "        total += item.price * item.count\n    total = total * (1 + tax)\n"
        "    return round(total, 2)\n"
    ),
    "csv_fix": (
        "Fix the one wrong year in this CSV (Ada Lovelace was born in 1815) and print the "
        "whole table again:\nname,born,field\nAda Lovelace,1851,mathematics\n"
        "Alan Turing,1912,computer science\nGrace Hopper,1906,computer science\n"
        "Emmy Noether,1882,mathematics\n"
    ),
    "poem": "Write a short poem about a lighthouse keeper who waits for a storm.",
    "explain": "Explain in a few sentences why bread goes stale, for a curious child.",
    "letter": "Write a brief, warm note thanking a neighbour for watering your plants.",
}

COPY_HEAVY = ("edit_fn", "edit_json", "summary", "list_copy", "rename_var", "csv_fix")
PROSE = ("write", "story", "poem", "explain", "letter")

# Held out from the calibrated policy's tuning (issue 20; the tuning set is the five packaged
# prompts and OWN_PROMPTS): written after it and reported apart, never tuned on. One file each
# in HELD_OUT_DIR, run as `specfleet bench -p bench/heldout/NAME.txt`.
HELD_OUT_DIR = Path(__file__).resolve().parent / "heldout"
# The second seven (from sort_names and village on) were written on 2026-12-03 after the
# shipped rule, and first replayed in policy-variants-2026-12-03.md ("A second held-out set").
HELD_OUT_COPY_HEAVY = ("edit_config", "edit_class", "recap",
                       "sort_names", "type_hints", "md_table", "spelling")
HELD_OUT_PROSE = ("teapot", "lake", "village", "librarian", "fable")


def kind_of(prompt: str) -> str:
    """"copy" or "prose" for a prompt of any set (held-out ones included)."""
    return "copy" if prompt in COPY_HEAVY or prompt in HELD_OUT_COPY_HEAVY else "prose"
