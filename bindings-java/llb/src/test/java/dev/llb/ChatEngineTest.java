package dev.llb;

import static dev.llb.Completions.assertOneValidToolCall;
import static dev.llb.Completions.json;
import static dev.llb.Completions.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Opening engines, non-streamed completions, errors and the engine's lifecycle. */
class ChatEngineTest {
    @TempDir
    static Path dir;
    static Path tools;
    static ChatEngine engine;

    @BeforeAll
    static void open() {
        tools = Fixtures.toolModel(dir);
        engine = ChatEngine.open(Fixtures.config(tools));
    }

    @AfterAll
    static void close() {
        engine.close();
    }

    @Test
    void openingAModelWithoutToolSupportThrowsLlbsRefusalWithTheCaps() {
        Path plain = Fixtures.plainModel(dir);
        ToolsUnsupportedException e = assertThrows(ToolsUnsupportedException.class, () -> ChatEngine.open(plain));
        assertEquals("Model plain.gguf rejected: its chat template does not support tool calling "
                + "(supports_tools=false, supports_tool_calls=false). Only tool-capable GGUFs can be loaded.", e.getMessage());
        assertEquals("tools_unsupported", e.code());
        assertEquals(false, e.caps().get("supports_tools"));
        assertEquals(false, e.caps().get("supports_tool_calls"));
        assertEquals(true, e.caps().get("supports_string_content"));
        assertEquals(8, e.caps().size(), e.caps().toString());
    }

    @Test
    void otherOpenFailuresCarryLlbsCode() {
        LlbException missing = assertThrows(LlbException.class, () -> ChatEngine.open(dir.resolve("nope.gguf")));
        assertEquals("file_not_found", missing.code());
        assertFalse(missing instanceof ToolsUnsupportedException);

        LlbException badKwargs = assertThrows(LlbException.class,
                () -> ChatEngine.open(ChatConfig.of(tools).withContextSize(0)));
        assertEquals("invalid_argument", badKwargs.code(), badKwargs.getMessage());
    }

    @Test
    void toolChoiceRequiredReturnsOneParseableToolCall() {
        String response = engine.infer(Requests.toolRequired());
        assertOneValidToolCall(message(response));
        assertEquals(1, json(response).path("choices").size());
    }

    @Test
    void aNamedToolChoiceCallsThatTool() {
        assertEquals("get_weather", assertOneValidToolCall(message(engine.infer(Requests.toolNamed()))).name());
    }

    @Test
    void textThatIsNotJsonIsInvalidJson() {
        LlbException e = assertThrows(LlbException.class, () -> engine.infer("{\"messages\": ["));
        assertEquals("invalid_json", e.code());
        assertEquals("invalid_json", assertThrows(LlbException.class, () -> engine.stream("not json", c -> { })).code());
    }

    @Test
    void anUnknownFieldIsInvalidArgumentNamingIt() {
        LlbException e = assertThrows(LlbException.class,
                () -> engine.infer("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"frequency_penaltyy\":1}"));
        assertEquals("invalid_argument", e.code());
        assertTrue(e.getMessage().contains("frequency_penaltyy"), e.getMessage());
    }

    @Test
    void aTokenCancelledBeforehandStopsTheCallAtItsFirstEvent() {
        CancellationToken token = new CancellationToken();
        token.cancel();
        String response = engine.infer(Requests.toolRequired(), token);
        assertEquals("cancelled", message(response).finishReason());
        assertEquals(0, json(response).path("usage").path("completion_tokens").asInt(), response);
    }

    @Test
    void closeIsIdempotentAndLaterCallsThrowIllegalState() {
        ChatEngine e = ChatEngine.open(Fixtures.config(tools));
        assertFalse(e.isClosed());
        e.close();
        e.close();
        assertTrue(e.isClosed());
        assertThrows(IllegalStateException.class, () -> e.infer(Requests.toolRequired()));
        assertThrows(IllegalStateException.class, () -> e.stream(Requests.toolRequired(), c -> { }));
    }

    @Test
    void configFieldsReachLlb() {
        String json = ChatConfig.of(tools).withContextSize(2048).withThreads(2).withBatchSize(256).withSeed(5)
                .withChatTemplateKwargs(Map.of("enable_thinking", false)).toJson();
        assertEquals(json(json), json("{\"model_path\":\"" + tools + "\",\"n_ctx\":2048,\"n_threads\":2,"
                + "\"n_batch\":256,\"seed\":5,\"chat_template_kwargs\":{\"enable_thinking\":false}}"));
        try (ChatEngine e = ChatEngine.open(ChatConfig.of(tools).withContextSize(256).withThreads(1))) {
            LlbException overflow = assertThrows(LlbException.class, () -> e.infer(
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"" + "word ".repeat(400) + "\"}],\"max_tokens\":1}"));
            assertEquals("context_overflow", overflow.code(), overflow.getMessage());
        }
    }
}
