package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.SystemMessage;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.tool.definition.ToolDefinition;

/** {@link LlbChatOptions} merging as Spring AI's builders merge, and the request JSON llb receives (no native code). */
class LlbChatOptionsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final List<ToolDefinition> TOOLS = List.of(ToolDefinition.builder().name("get_weather").description("Weather")
            .inputSchema("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}").build());

    @Test
    void mutateKeepsEveryFieldAndCombineWithLetsTheOtherWin() {
        LlbChatOptions defaults = LlbChatOptions.builder().temperature(0.2).maxTokens(100).seed(7L).toolChoice("auto")
                .parallelToolCalls(false).reasoningEffort("low").extraBody(Map.of("min_p", 0.05)).build();
        assertEquals(defaults, defaults.mutate().build());

        LlbChatOptions merged = defaults.mutate().combineWith(LlbChatOptions.builder().temperature(0.9).toolChoice("required")
                .toolChoiceAfterTools("none").extraBody(Map.of("top_k", 5))).build();
        assertEquals(0.9, merged.getTemperature());
        assertEquals(100, merged.getMaxTokens());
        assertEquals(7L, merged.getSeed());
        assertEquals("required", merged.getToolChoice());
        assertEquals("none", merged.getToolChoiceAfterTools());
        assertEquals(false, merged.getParallelToolCalls());
        assertEquals(Map.of("min_p", 0.05, "top_k", 5), merged.getExtraBody());

        // ChatClient merges the model's defaults with portable options too.
        LlbChatOptions portable = defaults.mutate().combineWith(ChatOptions.builder().topP(0.5)).build();
        assertEquals(0.5, portable.getTopP());
        assertEquals("auto", portable.getToolChoice());
        assertEquals(0.3, LlbChatOptions.from(ChatOptions.builder().temperature(0.3).build()).getTemperature());
    }

    static JsonNode request(List<Message> messages, LlbChatOptions options, List<ToolDefinition> tools) throws Exception {
        return JSON.readTree(Mapping.request(messages, options, tools));
    }

    @Test
    void theRequestCarriesOptionsToolsAndAToolChoice() throws Exception {
        LlbChatOptions o = LlbChatOptions.builder().temperature(0.0).topP(0.9).topK(20).maxTokens(64).seed(3L)
                .stopSequences(List.of("END")).frequencyPenalty(0.1).presencePenalty(0.2).toolChoice("get_weather")
                .parallelToolCalls(false).reasoningEffort("high").extraBody(Map.of("jump_forward", false)).build();
        JsonNode r = request(List.of(new SystemMessage("Be brief."), new UserMessage("Paris?")), o, TOOLS);
        assertEquals("system", r.at("/messages/0/role").asText());
        assertEquals("Paris?", r.at("/messages/1/content").asText());
        assertEquals(0.0, r.path("temperature").asDouble());
        assertEquals(0.9, r.path("top_p").asDouble());
        assertEquals(20, r.path("top_k").asInt());
        assertEquals(64, r.path("max_tokens").asInt());
        assertEquals(3, r.path("seed").asInt());
        assertEquals("END", r.at("/stop/0").asText());
        assertEquals(0.1, r.path("frequency_penalty").asDouble());
        assertEquals(0.2, r.path("presence_penalty").asDouble());
        assertEquals("high", r.path("reasoning_effort").asText());
        assertEquals(false, r.path("jump_forward").asBoolean(true));
        assertEquals("get_weather", r.at("/tools/0/function/name").asText());
        assertEquals("city", r.at("/tools/0/function/parameters/required/0").asText());
        assertEquals("get_weather", r.at("/tool_choice/function/name").asText(), "a tool name forces that tool");
        assertEquals(false, r.path("parallel_tool_calls").asBoolean(true));

        assertEquals("required", request(List.of(new UserMessage("x")),
                LlbChatOptions.builder().toolChoice("required").build(), TOOLS).path("tool_choice").asText());
        assertEquals("none", request(List.of(new UserMessage("x")),
                LlbChatOptions.builder().toolChoice("{\"type\":\"none\"}").build(), TOOLS).at("/tool_choice/type").asText());
    }

    @Test
    void speculativeIsARequestFieldThatMergesLikeTheOthers() throws Exception {
        LlbChatOptions off = LlbChatOptions.builder().speculative(false).temperature(0.2).build();
        assertEquals(off, off.mutate().build());
        assertEquals(false, request(List.of(new UserMessage("x")), off, List.of()).path("speculative").asBoolean(true));
        assertEquals(true, request(List.of(new UserMessage("x")), LlbChatOptions.builder().speculative(true).build(), List.of())
                .path("speculative").asBoolean(false));
        assertTrue(request(List.of(new UserMessage("x")), LlbChatOptions.builder().build(), List.of()).path("speculative")
                .isMissingNode(), "unset: the engine's config decides");

        // A prompt's option wins over the model's default; an unset one keeps it.
        assertEquals(true, off.mutate().combineWith(LlbChatOptions.builder().speculative(true)).build().getSpeculative());
        assertEquals(false, off.mutate().combineWith(LlbChatOptions.builder().temperature(0.9)).build().getSpeculative());
        assertEquals(false, off.mutate().combineWith(ChatOptions.builder().topP(0.5)).build().getSpeculative());
        assertNotEquals(off, LlbChatOptions.builder().speculative(true).temperature(0.2).build());
        assertTrue(off.toString().contains("speculative=false"), off.toString());
        // extraBody overrides a typed field of the same name, as documented.
        assertEquals(true, request(List.of(new UserMessage("x")), off.mutate().extraBody(Map.of("speculative", true)).build(),
                List.of()).path("speculative").asBoolean(false));
    }

    @Test
    void afterToolResultsTheFollowUpChoiceApplies() throws Exception {
        LlbChatOptions o = LlbChatOptions.builder().toolChoice("required").toolChoiceAfterTools("none").build();
        AssistantMessage call = AssistantMessage.builder().content("")
                .toolCalls(List.of(new AssistantMessage.ToolCall("call_1", "function", "get_weather", "{\"city\":\"Paris\"}"))).build();
        ToolResponseMessage result = ToolResponseMessage.builder()
                .responses(List.of(new ToolResponseMessage.ToolResponse("call_1", "get_weather", "sunny"))).build();
        JsonNode r = request(List.of(new UserMessage("Paris?"), call, result), o, TOOLS);
        assertEquals("none", r.path("tool_choice").asText());
        assertTrue(r.at("/messages/1/content").isNull());
        assertEquals("call_1", r.at("/messages/1/tool_calls/0/id").asText());
        assertEquals("{\"city\":\"Paris\"}", r.at("/messages/1/tool_calls/0/function/arguments").asText());
        assertEquals("tool", r.at("/messages/2/role").asText());
        assertEquals("call_1", r.at("/messages/2/tool_call_id").asText());
        assertEquals("sunny", r.at("/messages/2/content").asText());
        // Before the tools ran, the first choice applies.
        assertEquals("required", request(List.of(new UserMessage("Paris?")), o, TOOLS).path("tool_choice").asText());
    }

    @Test
    void aForcedChoiceWithoutToolsIsRefusedBeforeLlb() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Mapping.request(List.of(new UserMessage("x")), LlbChatOptions.builder().toolChoice("required").build(), List.of()));
        assertTrue(e.getMessage().contains("needs at least one tool"), e.getMessage());
        assertInstanceOf(IllegalArgumentException.class, assertThrows(RuntimeException.class,
                () -> Mapping.request(List.of(new UserMessage("x")), LlbChatOptions.builder().toolChoice("{oops").build(), TOOLS)));
    }
}
