package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.observation.Observation;
import io.micrometer.observation.ObservationRegistry;
import io.micrometer.tracing.handler.DefaultTracingObservationHandler;
import io.micrometer.tracing.test.simple.SimpleSpan;
import io.micrometer.tracing.test.simple.SimpleTracer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.prompt.Prompt;

/**
 * Traces of streamed calls, with Micrometer Tracing's handler over the observations: a stream's
 * {@code gen_ai.client.operation} span is a child of the {@code ChatClient} span when there is
 * one, and of the caller's span when the caller streams the model itself inside its own
 * observation, never of whatever other scope the thread has open.
 */
class StreamTracingTest {
    @TempDir
    static Path dir;

    static SimpleTracer tracer;
    static ObservationRegistry registry;
    static LlbChatModel llb;

    @BeforeAll
    static void open() {
        tracer = new SimpleTracer();
        registry = ObservationRegistry.create();
        registry.observationConfig().observationHandler(new DefaultTracingObservationHandler(tracer));
        llb = LlbChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir))).parallel(1).observationRegistry(registry)
                .defaultOptions(LlbChatOptions.builder().maxTokens(4).build()).build();
    }

    @AfterAll
    static void close() {
        llb.close();
    }

    @BeforeEach
    void clear() {
        tracer.getSpans().clear();
    }

    /** The one span named {@code nameStart...}, once it has ended (a Flux's doFinally may end it after blockLast). */
    private static SimpleSpan span(String nameStart) throws InterruptedException {
        List<SimpleSpan> spans = List.of();
        for (int i = 0; i < 200 && spans.isEmpty(); i++) {
            spans = tracer.getSpans().stream().filter(s -> s.getEndTimestamp().toEpochMilli() != 0)
                    .filter(s -> s.getName() != null && s.getName().startsWith(nameStart)).toList();
            Thread.sleep(spans.isEmpty() ? 10 : 0);
        }
        assertEquals(1, spans.size(), nameStart + " in " + tracer.getSpans());
        return spans.get(0);
    }

    /** The spans from {@code span} up its parents, itself first. */
    private static List<String> ancestry(SimpleSpan span) {
        Map<String, SimpleSpan> byId = new HashMap<>();
        tracer.getSpans().forEach(s -> byId.put(s.getSpanId(), s));
        List<String> ids = new ArrayList<>();
        for (SimpleSpan s = span; s != null; s = byId.get(s.getParentId())) {
            ids.add(s.getSpanId());
        }
        return ids;
    }

    @Test
    void aStreamsSpanIsAChildOfTheChatClientSpan() throws Exception {
        // An unrelated span is open on the thread (say the HTTP request's): the model's span must
        // still hang off the ChatClient span.
        Observation.createNotStarted("http.server", registry).observe(
                () -> ChatClient.builder(llb, registry, null, null).build().prompt().user("hi").stream().content().blockLast());
        SimpleSpan client = span("spring_ai chat_client");
        SimpleSpan model = span("chat ");
        SimpleSpan http = span("http.server");
        assertEquals(client.getTraceId(), model.getTraceId());
        // Under the ChatClient span (through its advisors' spans, as Spring AI nests them), not the HTTP span's direct child.
        List<String> up = ancestry(model);
        assertTrue(up.contains(client.getSpanId()), "the model's span descends from the ChatClient span: " + tracer.getSpans());
        assertTrue(up.indexOf(client.getSpanId()) < up.indexOf(http.getSpanId()));
        assertNotEquals(http.getSpanId(), model.getParentId());
    }

    @Test
    void aStreamSubscribedInTheCallersObservationIsItsChild() throws Exception {
        Observation.createNotStarted("caller", registry).observe(() -> assertNotNull(llb.stream(new Prompt("hi")).blockLast()));
        SimpleSpan parent = span("caller");
        SimpleSpan model = span("chat ");
        assertEquals(parent.getSpanId(), model.getParentId(), "the model's span's parent is the caller's span");
    }
}
