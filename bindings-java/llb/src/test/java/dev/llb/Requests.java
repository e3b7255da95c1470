package dev.llb;

/** Chat requests the tests send. Bounded schemas make random-weight models emit valid calls. */
final class Requests {
    private Requests() {}

    static final String WEATHER_TOOL = """
            {"type":"function","function":{"name":"get_weather","description":"Weather forecast for a city",
             "parameters":{"type":"object","properties":{
               "city":{"type":"string","enum":["Paris","Tokyo","Lima"]},
               "days":{"type":"integer","minimum":1,"maximum":7}},
              "required":["city","days"],"additionalProperties":false}}}""";

    static final String TIME_TOOL = """
            {"type":"function","function":{"name":"get_time","description":"Current time in a zone",
             "parameters":{"type":"object","properties":{"zone":{"type":"string","enum":["UTC","CET"]}},
              "required":["zone"],"additionalProperties":false}}}""";

    /** One call to any of the tools ({@code tool_choice: "required"}). */
    static String toolRequired() {
        return tools("\"required\"");
    }

    /** One call to get_weather ({@code tool_choice} naming it). */
    static String toolNamed() {
        return tools("{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}");
    }

    private static String tools(String toolChoice) {
        return """
                {"messages":[{"role":"user","content":"What is the weather in Paris for the next 3 days?"}],
                 "tools":[%s,%s],"tool_choice":%s,"parallel_tool_calls":false,"max_tokens":64,"seed":7}"""
                .formatted(WEATHER_TOOL, TIME_TOOL, toolChoice);
    }

    /** Plain text, no tools: {@code max_tokens} tokens at most. */
    static String text(int maxTokens) {
        return """
                {"messages":[{"role":"user","content":"Tell me a story."}],
                 "tool_choice":"none","max_tokens":%d,"temperature":1.0,"seed":11}""".formatted(maxTokens);
    }
}
