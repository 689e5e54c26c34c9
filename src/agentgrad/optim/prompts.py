"""Templates of the prompt optimizer, as constants with named fields."""

OPTIMIZER_SYSTEM = """\
You improve the prompts of the agents of a multi-agent LLM system. You are shown every agent's \
current prompt and tools, failure trajectories (which agent's output led to which error, found by \
gradient-based attribution), the losses (what went wrong), and earlier optimisation steps with \
their scores. You rewrite the prompts of the blamed agents only, so that the same failures do not \
happen again, without breaking what already works."""

OPTIMIZER_USER = """\
# Agents
{agents}

# Failures of this batch
{trajectories}

# Earlier steps
{history}

# Your task
Rewrite the prompts of these agents only: {blamed}.
Keep each prompt as it is and add or update a section that starts with the line "## Warning": \
a list of bullet points, each a short rule that prevents one of the failures above, illustrated by \
that failure case ("e.g. ..."). Merge duplicate bullets. Keep every protected text verbatim: \
{protected}. Each prompt must stay under {max_chars} characters.

Reply with one JSON object and nothing else:
{{"prompts": {{"<agent name>": "<the complete new prompt>", ...}}}}"""

OPTIMIZER_RETRY = """\
Your reply was rejected: {error}
Reply again with one JSON object {{"prompts": {{"<agent name>": "<complete new prompt>"}}}} for the \
agents {blamed} only."""

AGENT_BLOCK = """\
## {name}
Tools: {tools}
Prompt:
<<<
{prompt}
>>>"""

HISTORY_LINE = "Step {step}: updated {agents}; score {before} -> {after} ({verdict})"

WARNING_HEADER = "## Warning"
WARNING_BULLET = "- {rule}"
