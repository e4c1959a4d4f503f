"""Conversations rendered by the chat-template oracles (chat_template_oracle.py with
transformers, chat_template_jinja_fixtures.py with plain jinja2). Each case is a dict with
messages, optional tools, add_generation_prompt and extra template kwargs."""

# 26 Jul 2024 12:00 UTC: the same calendar date in every time zone within +-11 h, so
# strftime_now renders the same day wherever the C++ tests run.
FIXED_TIME = 1721995200

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city (température, \"quoted\" words, 日本).",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}, "precision": {"type": "integer", "default": 2}},
            "required": ["expression"],
        },
        "return": {"type": "number", "description": "The value, rounded."},
    },
}

CASES = [
    {"name": "single_turn", "messages": [{"role": "user", "content": "Hi!"}], "add_generation_prompt": True},
    {"name": "system_multi_turn", "add_generation_prompt": True, "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"}]},
    {"name": "ends_with_assistant_no_prompt", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello."}]},
    {"name": "thinking_off", "add_generation_prompt": True, "extra": {"enable_thinking": False},
     "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"name": "thinking_on", "add_generation_prompt": True, "extra": {"enable_thinking": True},
     "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"name": "reasoning_content_history", "add_generation_prompt": True, "extra": {"enable_thinking": True}, "messages": [
        {"role": "user", "content": "Pick a number."},
        {"role": "assistant", "content": "7", "reasoning_content": "Any small prime will do.\n"},
        {"role": "user", "content": "Why that one?"}]},
    {"name": "inline_think_in_content", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Pick a colour."},
        {"role": "assistant", "content": "<think>\nBlue is common.\n</think>\n\nBlue."}]},
    {"name": "tools_query", "add_generation_prompt": True, "tools": [WEATHER_TOOL, CALC_TOOL], "messages": [
        {"role": "system", "content": "You help with weather."},
        {"role": "user", "content": "Weather in Zürich?"}]},
    {"name": "tool_call_and_response", "add_generation_prompt": True, "tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}]},
    {"name": "parallel_tool_calls", "add_generation_prompt": True, "tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call00002", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call00002", "content": "rainy"},
        {"role": "assistant", "content": "Paris is sunny, Rome is rainy."},
        {"role": "user", "content": "Thanks!"}]},
    {"name": "multi_step_tool_with_reasoning", "add_generation_prompt": True, "tools": [CALC_TOOL], "messages": [
        {"role": "user", "content": "What is 12*7?"},
        {"role": "assistant", "content": "", "reasoning_content": "Use the calculator.", "tool_calls": [
            {"id": "call00003", "type": "function", "function": {"name": "calculate", "arguments": {"expression": "12*7"}}}]},
        {"role": "tool", "tool_call_id": "call00003", "content": "84"}]},
    {"name": "unicode_and_whitespace", "add_generation_prompt": True, "messages": [
        {"role": "system", "content": "  Réponds en français.  \n"},
        {"role": "user", "content": "  emoji 👩‍👩‍👧 and CJK 你好\tand tabs  \n\n"}]},
    {"name": "date_from_clock", "add_generation_prompt": True, "extra": {},
     "messages": [{"role": "user", "content": "What day is it?"}]},
    {"name": "date_string_given", "add_generation_prompt": True, "extra": {"date_string": "01 Jan 2025"},
     "messages": [{"role": "user", "content": "What day is it?"}]},
    {"name": "bad_role_order", "add_generation_prompt": True, "messages": [
        {"role": "assistant", "content": "I speak first."},
        {"role": "user", "content": "ok"}]},
]
