package com.example.weather;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.llb.ChatConfig;
import dev.llb.ChatEngine;
import java.nio.file.Path;

/**
 * Asks the model for the weather in Paris with one tool, {@code get_weather}, and
 * {@code tool_choice "required"}; prints the tool call it makes.
 *
 * <pre>java -p target/classes:target/lib --enable-native-access=dev.llb -m com.example.weather/com.example.weather.Main MODEL.gguf</pre>
 */
public final class Main {
    private Main() {}

    static final String REQUEST = """
            {"messages":[{"role":"user","content":"What is the weather in Paris?"}],
             "tools":[{"type":"function","function":{"name":"get_weather",
               "description":"Current weather of a city",
               "parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Tokyo","Lima"]}},
                 "required":["city"],"additionalProperties":false}}}],
             "tool_choice":"required","parallel_tool_calls":false,"max_tokens":96,"temperature":0,"seed":42}""";

    /**
     * Runs the request.
     *
     * @param args the GGUF model's path
     * @throws Exception on any failure
     */
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: Main MODEL.gguf");
            System.exit(2);
        }
        // One decoding thread: enough for a tiny model, and fair to a busy machine.
        try (ChatEngine engine = ChatEngine.open(ChatConfig.of(Path.of(args[0])).withContextSize(1024).withThreads(1))) {
            JsonNode completion = new ObjectMapper().readTree(engine.infer(REQUEST));
            JsonNode choice = completion.path("choices").path(0);
            JsonNode call = choice.path("message").path("tool_calls").path(0).path("function");
            System.out.println("finish_reason: " + choice.path("finish_reason").asText());
            System.out.println("tool: " + call.path("name").asText());
            System.out.println("arguments: " + call.path("arguments").asText());
        }
    }
}
