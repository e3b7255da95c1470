package dev.llb;

import static dev.llb.Completions.assemble;
import static dev.llb.Completions.assertOneValidToolCall;
import static dev.llb.Completions.json;
import static dev.llb.Completions.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** {@link ChatEngine#stream}: chunks, what they add up to, cancellation, failures in the consumer. */
class StreamingTest {
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

    @ParameterizedTest
    @ValueSource(strings = {"required", "named"})
    void streamedToolCallChunksAddUpToTheFinalMessage(String choice) {
        List<String> chunks = new ArrayList<>();
        String response = engine.stream(choice.equals("named") ? Requests.toolNamed() : Requests.toolRequired(), chunks::add);

        Completions.Message streamed = assemble(chunks);
        Completions.Message complete = message(response);
        assertEquals(complete, streamed);
        Completions.ToolCall call = assertOneValidToolCall(streamed);
        if (choice.equals("named")) {
            assertEquals("get_weather", call.name());
        }
        String id = json(response).path("id").asText();
        long argumentDeltas = chunks.stream().map(Completions::json)
                .peek(c -> assertEquals(id, c.path("id").asText()))
                .filter(c -> c.path("choices").path(0).path("delta").path("tool_calls").path(0).path("function").has("arguments"))
                .count();
        assertTrue(argumentDeltas > 2, "the arguments arrive in pieces as they are generated: " + chunks);
    }

    @Test
    void streamedTextChunksAddUpToTheFinalContent() {
        List<String> chunks = new ArrayList<>();
        String response = engine.stream(Requests.text(32), chunks::add);
        Completions.Message complete = message(response);
        assertEquals(complete, assemble(chunks));
        assertFalse(complete.content().isEmpty(), response);
        assertTrue(complete.toolCalls().isEmpty(), response);
        assertEquals("assistant", json(chunks.get(0)).path("choices").path(0).path("delta").path("role").asText());
    }

    @Test
    void streamTurnsStreamingOnWhateverTheRequestSays() {
        String request = Requests.text(4).replace("\"seed\":11", "\"seed\":11,\"stream\":false");
        assertTrue(request.contains("\"stream\":false"));
        List<String> chunks = new ArrayList<>();
        String response = engine.stream(request, chunks::add);
        assertEquals(message(response), assemble(chunks));
        assertEquals("length", message(response).finishReason());
    }

    @Test
    void cancellingFromTheConsumerEndsTheCallAsCancelledAndTheEngineStaysUsable() {
        CancellationToken token = new CancellationToken();
        List<String> chunks = new ArrayList<>();
        String response = engine.stream(Requests.toolRequired(), chunk -> {
            chunks.add(chunk);
            if (chunks.size() == 3) {
                token.cancel();
            }
        }, token);

        Completions.Message complete = message(response);
        assertEquals("cancelled", complete.finishReason(), response);
        assertEquals(complete, assemble(chunks));
        JsonNode usage = json(response).path("usage");
        assertTrue(usage.path("completion_tokens").asInt() < 20, usage.toString());

        assertOneValidToolCall(message(engine.infer(Requests.toolRequired())));
    }

    @Test
    void anExceptionInTheConsumerIsRethrownAfterTheNativeCallAndTheEngineStaysUsable() {
        IllegalStateException boom = new IllegalStateException("boom");
        List<String> seen = new ArrayList<>();
        IllegalStateException thrown = assertThrows(IllegalStateException.class,
                () -> engine.stream(Requests.toolRequired(), chunk -> {
                    seen.add(chunk);
                    if (seen.size() == 2) {
                        throw boom;
                    }
                }));
        assertSame(boom, thrown);
        assertEquals(2, seen.size(), "no chunk is delivered after the consumer failed");

        StackOverflowError error = new StackOverflowError("deep");
        assertSame(error, assertThrows(StackOverflowError.class,
                () -> engine.stream(Requests.toolRequired(), chunk -> { throw error; })));

        List<String> chunks = new ArrayList<>();
        String response = engine.stream(Requests.toolRequired(), chunks::add);
        assertEquals(message(response), assemble(chunks));
        assertOneValidToolCall(message(response));
    }

    @Test
    void closingFromInsideTheConsumerCancelsAndFreesTheEngineOnceTheCallReturns() {
        ChatEngine own = ChatEngine.open(Fixtures.config(tools));
        String response = own.stream(Requests.toolRequired(), chunk -> own.close());
        assertEquals("cancelled", message(response).finishReason());
        assertTrue(own.isClosed());
        assertThrows(IllegalStateException.class, () -> own.infer(Requests.toolRequired()));
        own.close();
    }
}
