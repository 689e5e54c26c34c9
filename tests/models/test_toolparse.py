import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrad.models.toolparse import parse_tool_calls


@pytest.mark.parametrize(
    "text,content,calls",
    [
        ('Sure.<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', "Sure.", [("f", {"a": 1})]),
        ('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>{"name": "g", "arguments": {"x": "y"}}</tool_call>',
         "", [("f", {}), ("g", {"x": "y"})]),
        ('<tool_call>{"name": "f", "arguments": {"a": 1}}', "", [("f", {"a": 1})]),  # no closing tag (stopped at EOS)
        ('[TOOL_CALLS] [{"name": "f", "arguments": {"a": 2}}]', "", [("f", {"a": 2})]),
        ('{"name": "f", "parameters": {"a": 3}}', "", [("f", {"a": 3})]),
        ('<|python_tag|>{"name": "f", "parameters": {"a": 4}}', "", [("f", {"a": 4})]),
        ('ok <function=f>{"a": 5}</function>', "ok", [("f", {"a": 5})]),
        ('{"name": "f", "arguments": "{\\"a\\": 6}"}', "", [("f", {"a": 6})]),
    ],
)
def test_formats(text, content, calls):
    got_content, got = parse_tool_calls(text)
    assert got_content == content
    assert [(c.name, c.arguments) for c in got] == calls


@pytest.mark.parametrize(
    "text",
    ["plain answer", "<tool_call>{not json}</tool_call>", '{"answer": 42}', "[TOOL_CALLS] nope",
     '<function=f>{bad}</function>', '{"name": "f", "arguments": [1]}', ""],
)
def test_unparseable_stays_text(text):
    assert parse_tool_calls(text) == (text, [])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<function=", "f", "g.h", ">", "</function>", " ", "\n", "{}", '{"a": 1}',
                                 "<function=>", "x"]), max_size=14))
def test_function_tags_are_what_the_regex_finds(parts):
    """The linear-time scan finds what the plain regex finds (which takes cubic time on degenerate replies)."""
    import re

    from agentgrad.models.toolparse import _function_tags

    text = "".join(parts)
    regex = re.compile(r"<function=([\w.\-]+)>\s*(.*?)\s*</function>", re.S)
    assert [(n, b.strip()) for n, b in _function_tags(text)] == [m.groups() for m in regex.finditer(text)]


def test_degenerate_replies_are_replies():
    """A reply that repeats an opening tag or pads it with spaces is returned as text (and at once)."""
    for text in ("<function=f>" * 20000, "<tool_call>" + " " * 100000 + "x", "<function=f>" + " " * 100000 + "x"):
        assert parse_tool_calls(text) == (text, [])
    assert parse_tool_calls("ok <function=f>" + " " * 5000 + '{"a": 1}' + " " * 5000 + "</function>")[1][0].arguments == {"a": 1}
