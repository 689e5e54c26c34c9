"""A readable console view of a trace: calls, their inputs with spans marked, and outputs."""

from __future__ import annotations

import json

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text as RichText

from agentgrad.core.trace import Node, Trace

_COLORS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]


def _color(source: int) -> str:
    return _COLORS[source % len(_COLORS)]


def _marked(content: str, node: Node, message: int, max_chars: int) -> RichText:
    """The message with every span coloured and prefixed by the id of its source node."""
    out = RichText()
    pos = 0
    for s in sorted((s for s in node.spans if s.message == message), key=lambda s: s.start):
        out.append(content[pos : s.start])
        out.append(f"[n{s.source}]", style=f"bold {_color(s.source)}")
        out.append(_cut(content[s.start : s.end], max_chars), style=_color(s.source))
        pos = s.end
    out.append(content[pos:])
    return out


def _cut(text: str, max_chars: int) -> str:
    if max_chars and len(text) > max_chars:
        return text[: max_chars // 2] + f" ... [{len(text) - max_chars:,} characters cut] ... " + text[-max_chars // 2 :]
    return text


def render_node(node: Node, max_chars: int = 2000) -> Panel:
    if node.kind == "call":
        usage = node.usage
        title = (
            f"[bold]n{node.id} call[/bold] {node.name}  model={node.model.get('ref', '')}  "
            f"tokens={usage.get('prompt_tokens', '?')}+{usage.get('completion_tokens', '?')}  "
            f"{node.timing.get('seconds', 0):.2f}s"
        )
        parts: list[RichText] = []
        for i, m in enumerate(node.messages):
            parts.append(RichText(f"-- {m['role']} --", style="bold dim"))
            body = m["role"] == "system" and not any(s.message == i for s in node.spans)
            parts.append(RichText(_cut(m.get("content") or "", max_chars)) if body else _marked(m.get("content") or "", node, i, max_chars))
            for c in m.get("tool_calls") or []:
                parts.append(RichText(f"tool call {c['name']}({json.dumps(c['arguments'])})", style="italic"))
        parts.append(RichText("== output ==", style="bold green"))
        parts.append(RichText(_cut(node.text, max_chars)))
        for c in node.tool_calls:
            args = c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)
            parts.append(RichText(f"tool call {c.name}({args})", style="bold italic"))
        return Panel(Group(*parts), title=title, title_align="left")
    if node.kind == "tool":
        args = json.dumps(node.meta.get("arguments", {}))
        title = f"[bold]n{node.id} tool[/bold] {node.name}({args}) <- n{', n'.join(map(str, node.parents))}"
        return Panel(RichText(_cut(node.text, max_chars)), title=title, title_align="left", border_style=_color(node.id))
    title = f"[bold]n{node.id} {node.kind}[/bold] {node.name}"
    return Panel(RichText(_cut(node.text, max_chars)), title=title, title_align="left", border_style=_color(node.id))


def show_trace(trace: Trace, console: Console | None = None, max_chars: int = 2000) -> None:
    console = console or Console(emoji=False)
    calls = trace.calls()
    console.print(
        f"[bold]trace {trace.id or '(no id)'}[/bold]: {len(trace)} nodes, {len(calls)} calls, "
        f"agents: {', '.join(dict.fromkeys(n.name for n in calls)) or 'none'}"
    )
    for node in trace:
        console.print(render_node(node, max_chars))
    if "output" in trace.meta:
        console.print(f"[bold]result:[/bold] {trace.meta['output']}")
    if "error" in trace.meta:
        console.print(f"[bold red]error:[/bold red] {trace.meta['error']}")
