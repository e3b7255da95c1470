"""Drives the llb example server with the official `openai` Python client.

    python openai_client_check.py BASE_URL tools|fields|refused

`tools`: the server has a tool-capable model; `fields`: the same, with the request fields SDKs
send (penalties, logit_bias, logprobs, reasoning_effort, ignored ones, refused ones);
`refused`: llb refused the server's model.
Prints `PASS <check>` per check (the JUnit test compares the set) and exits non-zero at the
first failure. Every tool call is read through the client's own parsing: its pydantic models for
plain responses, its stream accumulator (`chat.completions.stream`) for streamed ones.
"""
import json
import sys

import openai

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def request(tool_choice):
    return dict(model="any-name", messages=MESSAGES, tools=[WEATHER, TIME], tool_choice=tool_choice,
                parallel_tool_calls=False, max_tokens=64, seed=7)


def passed(name):
    print("PASS", name, flush=True)


def check_call(call, expected_name=None):
    """One schema-valid call, as the client parsed it: (id, name, arguments) -> the arguments."""
    assert call.type == "function", call
    assert call.id.startswith("call_"), call
    name, args = call.function.name, json.loads(call.function.arguments)
    if expected_name:
        assert name == expected_name, call
    if name == "get_weather":
        assert set(args) == {"city", "days"} and args["city"] in WEATHER["function"]["parameters"]["properties"]["city"]["enum"], args
        assert isinstance(args["days"], int) and 1 <= args["days"] <= 7, args
    else:
        assert name == "get_time" and args in ({"zone": "UTC"}, {"zone": "CET"}), call
    return args


def check_completion(completion, expected_name=None):
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", completion
    assert len(choice.message.tool_calls) == 1, completion
    check_call(choice.message.tool_calls[0], expected_name)
    return choice.message.tool_calls[0]


def tools_checks(client):
    models = client.models.list().data
    assert [m.id for m in models] == ["tools.gguf"], models
    passed("models")

    check_completion(client.chat.completions.create(**request("required")))
    passed("create_required")
    check_completion(client.chat.completions.create(**request(NAMED)), "get_weather")
    passed("create_named")

    # The usual tool loop: the client's own message object goes back with the tool's result.
    assistant = client.chat.completions.create(**request(NAMED)).choices[0].message
    call = assistant.tool_calls[0]
    check_call(call, "get_weather")
    follow_up = client.chat.completions.create(
        model="any-name", tools=[WEATHER, TIME], tool_choice="none", max_tokens=16,
        messages=MESSAGES + [assistant, {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny"}'}])
    assert follow_up.choices[0].finish_reason in ("stop", "length"), follow_up
    assert not follow_up.choices[0].message.tool_calls, follow_up
    passed("tool_loop")

    for label, choice, name in (("required", "required", None), ("named", NAMED, "get_weather")):
        done_events = []
        with client.chat.completions.stream(**request(choice), stream_options={"include_usage": True}) as stream:
            for event in stream:
                if event.type == "tool_calls.function.arguments.done":
                    done_events.append(event)
            final = stream.get_final_completion()
        call = check_completion(final, name)
        assert len(done_events) == 1, done_events
        assert (done_events[0].name, done_events[0].arguments) == (call.function.name, call.function.arguments), done_events
        assert final.usage is not None and final.usage.completion_tokens > 0, final.usage
        passed("stream_" + label)

    # Plain create(stream=True): the SSE stream ends at `data: [DONE]`; deltas rebuilt by hand.
    chunks = list(client.chat.completions.create(**request("required"), stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    rebuilt_args = "".join(tc.function.arguments or "" for tc in calls if tc.function)
    names = [tc.function.name for tc in calls if tc.function and tc.function.name]
    assert names in (["get_weather"], ["get_time"]), names
    assert json.loads(rebuilt_args), rebuilt_args
    assert chunks[-1].choices[0].finish_reason == "tool_calls", chunks[-1]
    passed("create_stream_raw")

    try:
        client.chat.completions.create(**request("required"), n=2)
        raise AssertionError("n=2 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.code == "invalid_argument" and e.param == "n", e
        assert e.type == "invalid_request_error", e
    passed("error_invalid_argument")

    try:
        client.chat.completions.create(**request("required"), extra_body={"frobnicate": True}, stream=True)
        raise AssertionError("an unknown field was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == "frobnicate", e
    passed("error_unknown_field_streamed")


# Fields OpenAI's SDK sends that llb implements (penalties, logit_bias, logprobs, reasoning_effort)
# or accepts and ignores (store, metadata, ...), set through the client's own keyword arguments.
FIELDS = dict(frequency_penalty=0.5, presence_penalty=0.3, logit_bias={"0": 2}, logprobs=True, top_logprobs=3,
              reasoning_effort="low", store=False, metadata={"check": "fields"}, service_tier="auto",
              prompt_cache_key="conv-1", safety_identifier="user-hash", user="u1", modalities=["text"])


def check_logprobs(logprobs, at_most):
    """The client's parsed ChatCompletionTokenLogprob entries: 1..at_most, each sane."""
    assert logprobs is not None and logprobs.content, logprobs
    assert len(logprobs.content) <= at_most, (len(logprobs.content), at_most)
    for entry in logprobs.content:
        assert entry.logprob <= 0 and isinstance(entry.token, str) and entry.bytes is not None, entry
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and all(t <= 0 for t in tops), entry
        assert entry.logprob <= tops[0] + 1e-6, entry


def fields_checks(client):
    for label, choice, name in (("auto", "auto", None), ("required", "required", None),
                                ("named", NAMED, "get_weather")):
        completion = client.chat.completions.create(**request(choice), **FIELDS)
        choice0 = completion.choices[0]
        if choice0.finish_reason == "tool_calls" or name:
            check_completion(completion, name)
        else:
            assert choice0.finish_reason in ("stop", "length") and choice0.message.content is not None, completion
        check_logprobs(choice0.logprobs, completion.usage.completion_tokens)
        passed("fields_create_" + label)

        with client.chat.completions.stream(**request(choice), **FIELDS, stream_options={"include_usage": True}) as stream:
            try:
                final = stream.get_final_completion()
            except openai.LengthFinishReasonError as e:  # auto: text may run into max_tokens
                assert not name and choice != "required", e
                final = e.completion
        if name or choice == "required":
            check_completion(final, name)
        check_logprobs(final.choices[0].logprobs, final.usage.completion_tokens)
        passed("fields_stream_" + label)

    chunks = list(client.chat.completions.create(**request("required"), **FIELDS, stream=True))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content or []]
    assert entries and all(e.logprob <= 0 for e in entries), chunks
    passed("fields_stream_raw_logprobs")

    for label, kwargs, param in (
            ("image_part", dict(messages=[{"role": "user", "content": [
                {"type": "text", "text": "What is in this image?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]),
             "messages[0].content[1]"),
            ("audio_modality", dict(modalities=["text", "audio"]), "modalities[1]"),
            ("n_2", dict(n=2), "n"),
            ("top_logprobs_21", dict(logprobs=True, top_logprobs=21), "top_logprobs")):
        args = {**request("auto"), **kwargs}
        try:
            client.chat.completions.create(**args)
            raise AssertionError(label + " was accepted")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.code == "invalid_argument" and e.param == param, e
        passed("error_" + label)


def refused_checks(client):
    assert client.models.list().data == [], "a refused model is not listed"
    passed("models_empty")
    for stream in (False, True):
        try:
            client.chat.completions.create(**request("required"), stream=stream)
            raise AssertionError("the refused model answered")
        except openai.UnprocessableEntityError as e:
            assert e.status_code == 422 and e.code == "tools_unsupported", e
            assert e.body["message"] == ("Model plain.gguf rejected: its chat template does not support tool calling "
                                 "(supports_tools=false, supports_tool_calls=false). "
                                 "Only tool-capable GGUFs can be loaded."), e.body
        passed("refused_" + ("stream" if stream else "create"))


def main():
    base_url, mode = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
    {"tools": tools_checks, "fields": fields_checks, "refused": refused_checks}[mode](client)


if __name__ == "__main__":
    main()
