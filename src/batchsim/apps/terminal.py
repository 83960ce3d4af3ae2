"""Printing through rich without losing text: user strings kept whole, tables kept whole.

rich reads `[...]` as markup, so a message or a name that holds square brackets (an arm named
`a[red]b`, the hint `pip install 'batchsim[calibrate]'`) would lose them: every user string
goes through `escape` or is printed with markup off. Off a terminal (a file, a pipe) rich
assumes 80 columns and cuts a wider table's headers and cells; there nothing needs to fit a
screen, so the console is as wide as the widest table.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

# Wide enough for any table we print; rich does not pad text or tables out to this width.
_OFF_TERMINAL_WIDTH = 10_000


def output_console(*, stderr: bool = False) -> Console:
    """A console for results: the terminal's width on a terminal, no limit off one."""
    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, width=_OFF_TERMINAL_WIDTH)


def print_plain(console: Console, text: str) -> None:
    """A line of plain text (paths, names, numbers), printed as it is."""
    console.print(text, markup=False, highlight=False)


def print_error(message: str, *, label: str = "error") -> None:
    """`error: MESSAGE` on stderr in one line, the message's brackets kept."""
    Console(stderr=True, soft_wrap=True).print(
        f"[bold red]{label}:[/] {escape(message)}", highlight=False)
