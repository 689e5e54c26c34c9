import pytest

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
