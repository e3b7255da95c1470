package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.common.KeyValue;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.observation.DefaultMeterObservationHandler;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.micrometer.observation.Observation;
import io.micrometer.observation.ObservationHandler;
import io.micrometer.observation.ObservationRegistry;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.observation.ChatModelMeterObservationHandler;
import org.springframework.ai.chat.observation.ChatModelObservationContext;
import org.springframework.ai.chat.observation.ChatModelObservationDocumentation.HighCardinalityKeyNames;
import org.springframework.ai.chat.observation.ChatModelObservationDocumentation.LowCardinalityKeyNames;
import org.springframework.ai.chat.observation.DefaultChatModelObservationConvention;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.observation.conventions.AiObservationMetricAttributes;
import org.springframework.ai.observation.conventions.AiObservationMetricNames;
import org.springframework.ai.observation.conventions.AiTokenType;

/**
 * {@link LlbChatModel}'s observations: one Spring AI {@code gen_ai.client.operation} per call and
 * per stream, with the standard keys and the usage, seen by a recording handler; Spring AI's
 * meter handler turns them into {@code gen_ai.client.token.usage} counters and Micrometer's into
 * a timer.
 */
class LlbObservationTest {
    @TempDir
    static Path dir;

    static LlbChatModel llb;
    static final List<ChatModelObservationContext> stopped = Collections.synchronizedList(new ArrayList<>());
    static final SimpleMeterRegistry meters = new SimpleMeterRegistry();

    /** Keeps every chat model observation once it has stopped (its key values are then final). */
    static final class Recorder implements ObservationHandler<ChatModelObservationContext> {
        @Override
        public void onStop(ChatModelObservationContext context) {
            stopped.add(context);
        }

        @Override
        public boolean supportsContext(Observation.Context context) {
            return context instanceof ChatModelObservationContext;
        }
    }

    @BeforeAll
    static void open() {
        ObservationRegistry registry = ObservationRegistry.create();
        registry.observationConfig().observationHandler(new Recorder())
                .observationHandler(new ChatModelMeterObservationHandler(meters))
                .observationHandler(new DefaultMeterObservationHandler(meters));
        llb = LlbChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir))).parallel(2)
                .observationRegistry(registry).build();
    }

    @AfterAll
    static void close() {
        llb.close();
    }

    static Map<String, String> keys(Iterable<KeyValue> values) {
        Map<String, String> map = new TreeMap<>();
        values.forEach(kv -> map.put(kv.getKey(), kv.getValue()));
        return map;
    }

    /** The observation's keys: those of every chat observation, and the usage of {@code response}. */
    static void checkObservation(ChatModelObservationContext o, ChatResponse response, boolean streaming) {
        assertEquals(DefaultChatModelObservationConvention.DEFAULT_NAME, o.getName());
        Map<String, String> low = keys(o.getLowCardinalityKeyValues());
        Map<String, String> high = keys(o.getHighCardinalityKeyValues());
        assertEquals("chat", low.get(LowCardinalityKeyNames.AI_OPERATION_TYPE.asString()), low.toString());
        assertEquals("llb", low.get(LowCardinalityKeyNames.AI_PROVIDER.asString()), low.toString());
        assertEquals("tools.gguf", low.get(LowCardinalityKeyNames.REQUEST_MODEL.asString()), low.toString());
        assertEquals("tools.gguf", low.get(LowCardinalityKeyNames.RESPONSE_MODEL.asString()), low.toString());
        assertEquals("0.7", high.get(HighCardinalityKeyNames.REQUEST_TEMPERATURE.asString()), high.toString());
        assertEquals("6", high.get(HighCardinalityKeyNames.REQUEST_MAX_TOKENS.asString()), high.toString());
        assertEquals("[\"LENGTH\"]", high.get(HighCardinalityKeyNames.RESPONSE_FINISH_REASONS.asString()), high.toString());
        assertEquals(response.getMetadata().getId(), high.get(HighCardinalityKeyNames.RESPONSE_ID.asString()));
        var usage = response.getMetadata().getUsage();
        assertTrue(usage.getPromptTokens() > 0, usage.toString());
        assertEquals(String.valueOf(usage.getPromptTokens()), high.get(HighCardinalityKeyNames.USAGE_INPUT_TOKENS.asString()));
        assertEquals("6", high.get(HighCardinalityKeyNames.USAGE_OUTPUT_TOKENS.asString()), high.toString());
        assertEquals(String.valueOf(usage.getPromptTokens() + 6), high.get(HighCardinalityKeyNames.USAGE_TOTAL_TOKENS.asString()));
        assertNotNull(high.get(HighCardinalityKeyNames.USAGE_CACHE_READ_INPUT_TOKENS.asString()), high.toString());
        assertEquals(streaming ? "true" : null, high.get(HighCardinalityKeyNames.REQUEST_STREAM.asString()));
    }

    @Test
    void oneObservationPerCallAndPerStreamWithTheStandardKeysAndUsage() throws Exception {
        long start = System.nanoTime();
        stopped.clear();
        LlbChatOptions options = LlbChatOptions.builder().temperature(0.7).maxTokens(6).build();
        ChatResponse called = llb.call(new Prompt("Say something.", options));
        assertEquals(1, stopped.size(), "one observation per call");
        checkObservation(stopped.get(0), called, false);
        assertEquals("chat tools.gguf", stopped.get(0).getContextualName());

        List<ChatResponse> streamed = llb.stream(new Prompt("Say something else.", options)).collectList().block();
        assertNotNull(streamed);
        ChatResponse last = streamed.get(streamed.size() - 1);
        for (int i = 0; i < 500 && stopped.size() < 2; i++) {
            Thread.sleep(10); // the stream's observation stops in doFinally, just after the last element
        }
        assertEquals(2, stopped.size(), "one observation per stream");
        ChatModelObservationContext s = stopped.get(1);
        assertTrue(s.isStreaming());
        checkObservation(s, last, true);
        assertEquals("LENGTH", s.getResponse().getResult().getMetadata().getFinishReason());

        // ChatClient calls go through the same model: a third observation.
        ChatClient.create(llb).prompt().user("Hi").options(LlbChatOptions.builder().temperature(0.7).maxTokens(6)).call().content();
        assertEquals(3, stopped.size());

        // Spring AI's meter handler: gen_ai.client.token.usage per token type, tagged with the low-cardinality keys.
        long input = 0;
        for (ChatModelObservationContext o : stopped) {
            input += o.getResponse().getMetadata().getUsage().getPromptTokens();
        }
        Counter in = meters.find(AiObservationMetricNames.TOKEN_USAGE.value())
                .tag(AiObservationMetricAttributes.TOKEN_TYPE.value(), AiTokenType.INPUT.value())
                .tag(LowCardinalityKeyNames.AI_PROVIDER.asString(), "llb").counter();
        assertNotNull(in, meters.getMetersAsString());
        assertEquals(input, (long) in.count());
        Counter out = meters.find(AiObservationMetricNames.TOKEN_USAGE.value())
                .tag(AiObservationMetricAttributes.TOKEN_TYPE.value(), AiTokenType.OUTPUT.value()).counter();
        assertNotNull(out);
        assertEquals(18, (long) out.count());
        // Micrometer's own handler: the operation as a timer (latency), three calls.
        long timed = meters.find(DefaultChatModelObservationConvention.DEFAULT_NAME).tag("error", "none").timers()
                .stream().mapToLong(Timer::count).sum();
        assertEquals(3, timed, meters.getMetersAsString());
        System.out.printf("observations test: %.1f s%n", (System.nanoTime() - start) / 1e9);
    }

    @Test
    void aFailedCallIsAnObservationWithItsError() {
        stopped.clear();
        LlbChatOptions bad = LlbChatOptions.builder().extraBody(Map.of("n", 3)).build();
        try {
            llb.call(new Prompt("hi", bad));
        } catch (RuntimeException expected) {
            // checked below
        }
        assertEquals(1, stopped.size());
        assertNotNull(stopped.get(0).getError(), "the observation carries the error");
    }
}
