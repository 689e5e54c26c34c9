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

# Failures of this batch, per agent (each agent's section holds only the trajectories it is on)
{trajectories}

# Earlier steps
{history}

# Your task
Rewrite the prompts of these agents only: {blamed}.
Keep each prompt as it is and add or update a section that starts with the line "## Warning": \
a list of bullet points, each a short rule that prevents one of the failures in that agent's own \
section above, illustrated by that failure case ("e.g. ..."). Merge duplicate bullets. Keep every protected text verbatim: \
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

FAILURES_OF = "## Failures on trajectories through {agent}"

HISTORY_LINE = "Step {step}: updated {agents}; score {before} -> {after} ({verdict})"

WARNING_HEADER = "## Warning"
WARNING_BULLET = "- {rule}"

# --- target back-propagation (optimizer kind "target") -------------------------------------------
TARGET_SYSTEM = """\
You help repair a multi-agent LLM system by writing target outputs: for one agent call, what its \
output should have been so that the system succeeds. A target is a complete output in the same \
form as the one the call produced (same format, same kind of content), changed only where it was \
wrong. Reply with one JSON object and nothing else: {"target": "<the complete target output>"}"""

TARGET_FINAL = """\
# The call
Agent: {agent}
Its input:
<<<
{inputs}
>>>
Its output:
<<<
{output}
>>>

# What went wrong (the loss)
{loss}

Write the target output of this call: what it should have produced."""

TARGET_SOURCE = """\
# A call whose output must change
Agent {reader} read the output of agent {source}{via} and produced:
<<<
{reader_output}
>>>
It should have produced (its target):
<<<
{reader_target}
>>>

# The output of {source}
{source_inputs_note}<<<
{source_output}
>>>

Write the target output of {source}: what it should have produced so that {reader} can reach its \
target. Change only what {reader} needed; keep the rest."""

TARGET_RETRY = """\
Your reply was rejected: {error}
Reply again with one JSON object {{"target": "<the complete target output>"}}."""

TARGET_OPTIMIZER_USER = """\
# Agents
{agents}

# Outputs and their targets
For each agent to update: outputs it produced in failed episodes, each with the target output it \
should have produced (written by walking the failure back through the system).
{pairs}

# Earlier steps
{history}

# Your task
Rewrite the prompts of these agents only: {blamed}, so that their outputs move from what they \
produced toward their targets, without breaking what already works. Keep each prompt as it is and \
add or update a section that starts with the line "## Warning": short rules, each illustrated by \
one of the cases above. Keep every protected text verbatim: {protected}. Each prompt must stay \
under {max_chars} characters.

Reply with one JSON object and nothing else:
{{"prompts": {{"<agent name>": "<the complete new prompt>", ...}}}}"""

PAIR_BLOCK = """\
## {agent}, case {i}
Produced:
<<<
{output}
>>>
Target:
<<<
{target}
>>>"""
