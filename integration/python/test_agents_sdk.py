"""The OpenAI Agents SDK (`openai-agents`) through the filter: an `Agent` with a function tool,
run by `Runner` on its default model API (the Responses API) against models served only by an
OpenAI chat completions endpoint (mistral-small-3.2 on fireworks) and only by Anthropic Messages
(claude-haiku-4-5), so every turn is translated. The scripted mock model (`x-mock-behavior:
agent`) calls the tool on the path in the prompt; the tool answers with a word only the test
knows, and the agent's final answer must carry it: the tool ran and its result went back.
Tracing (which would call OpenAI) is off. Runs against the demo stack."""
import asyncio

import agents
import openai
import pytest

WORD = "BERGAMOT"
PATH = "/srv/notes/secret.txt"


@pytest.mark.parametrize(
    "model,provider",
    [("mistralai/mistral-small-3.2", "fireworks"), ("anthropic/claude-haiku-4-5", "anthropic-direct")],
)
def test_agent_runs_its_function_tool_through_a_translated_model(demo_port, model, provider):
    calls = []

    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a text file and return its contents."""
        calls.append(path)
        return f"The secret word is {WORD}." if path == PATH else "no such file"

    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{demo_port}/v1",
        api_key="caller-key-never-forwarded",
        max_retries=0,
        timeout=20,
        default_headers={"x-mock-behavior": f"{provider}=agent", "x-test-id": f"agents-{provider}"},
    )
    agents.set_tracing_disabled(True)
    agent = agents.Agent(
        name="reader",
        instructions="Answer with the secret word only.",
        tools=[read_file],
        model=agents.OpenAIResponsesModel(model=model, openai_client=client),
    )

    async def run():
        try:
            return await agents.Runner.run(agent, f"What is the secret word in {PATH}?", max_turns=4)
        finally:
            await client.close()

    result = asyncio.run(run())
    assert calls == [PATH], "the tool ran once, on the path the model named"
    assert WORD in result.final_output, result.final_output
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"], kinds
