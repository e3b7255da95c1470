package dev.llb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/** Reads completions and adds up streamed chunks the way an OpenAI client does. */
final class Completions {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private Completions() {}

    record ToolCall(String id, String name, String arguments) {}

    record Message(String content, List<ToolCall> toolCalls, String finishReason) {}

    static JsonNode json(String text) {
        try {
            return MAPPER.readTree(text);
        } catch (JsonProcessingException e) {
            throw new AssertionError("not JSON: " + text, e);
        }
    }

    /** The message and finish reason of a {@code chat.completion}. */
    static Message message(String completion) {
        JsonNode root = json(completion);
        assertEquals("chat.completion", root.path("object").asText(), completion);
        JsonNode choice = root.path("choices").path(0);
        JsonNode message = choice.path("message");
        List<ToolCall> calls = new ArrayList<>();
        for (JsonNode c : message.path("tool_calls")) {
            calls.add(new ToolCall(c.path("id").asText(), c.path("function").path("name").asText(),
                    c.path("function").path("arguments").asText()));
        }
        return new Message(message.path("content").asText(""), calls, choice.path("finish_reason").asText());
    }

    /** What a list of {@code chat.completion.chunk}s adds up to. */
    static Message assemble(List<String> chunks) {
        StringBuilder content = new StringBuilder();
        List<String[]> calls = new ArrayList<>(); // id, name, arguments
        String finish = null;
        for (String chunk : chunks) {
            JsonNode root = json(chunk);
            assertEquals("chat.completion.chunk", root.path("object").asText(), chunk);
            for (JsonNode choice : root.path("choices")) {
                JsonNode delta = choice.path("delta");
                if (delta.path("content").isTextual()) {
                    content.append(delta.path("content").asText());
                }
                for (JsonNode call : delta.path("tool_calls")) {
                    int index = call.path("index").asInt();
                    while (calls.size() <= index) {
                        calls.add(new String[] {"", "", ""});
                    }
                    String[] acc = calls.get(index);
                    if (call.has("id")) {
                        acc[0] = call.path("id").asText();
                    }
                    acc[1] += call.path("function").path("name").asText("");
                    acc[2] += call.path("function").path("arguments").asText("");
                }
                if (choice.path("finish_reason").isTextual()) {
                    finish = choice.path("finish_reason").asText();
                }
            }
        }
        return new Message(content.toString(), calls.stream().map(c -> new ToolCall(c[0], c[1], c[2])).toList(), finish);
    }

    /** Exactly one call to get_weather or get_time, whose arguments satisfy that tool's schema. */
    static ToolCall assertOneValidToolCall(Message message) {
        assertEquals("tool_calls", message.finishReason(), message.toString());
        assertEquals(1, message.toolCalls().size(), message.toString());
        ToolCall call = message.toolCalls().get(0);
        assertTrue(call.id().startsWith("call_"), call.toString());
        JsonNode args = json(call.arguments());
        switch (call.name()) {
            case "get_weather" -> {
                assertTrue(Set.of("Paris", "Tokyo", "Lima").contains(args.path("city").asText()), call.arguments());
                assertTrue(args.path("days").isInt(), call.arguments());
                int days = args.path("days").asInt();
                assertTrue(days >= 1 && days <= 7, call.arguments());
                assertEquals(2, args.size(), call.arguments());
            }
            case "get_time" -> {
                assertTrue(Set.of("UTC", "CET").contains(args.path("zone").asText()), call.arguments());
                assertEquals(1, args.size(), call.arguments());
            }
            default -> fail("unknown tool " + call.name());
        }
        return call;
    }
}
