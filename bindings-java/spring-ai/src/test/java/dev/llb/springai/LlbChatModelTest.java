package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.llb.LlbException;
import dev.llb.ToolsUnsupportedException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.metadata.Usage;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.support.ToolCallbacks;
import org.springframework.ai.tool.ToolCallback;
import org.springframework.ai.tool.annotation.Tool;
import org.springframework.ai.tool.annotation.ToolParam;
import reactor.core.publisher.Flux;

/**
 * {@link LlbChatModel} on a random-weight fixture: a forced tool call through {@code call} and
 * {@code stream} whose arguments Spring AI's own tool callback accepts, {@code ChatClient}'s
 * tool loop with {@code @Tool} methods, 16 concurrent {@code ChatClient} calls on one model, and
 * llb's errors as Spring AI's.
 *
 * <p>A random-weight model never chooses a tool by itself: the tests force the call with
 * {@code toolChoice} and let the turn after the tool result answer ({@code toolChoiceAfterTools "none"}).
 */
class LlbChatModelTest {
    @TempDir
    static Path dir;

    static Path model;
    static LlbChatModel llb;

    static final ObjectMapper JSON = new ObjectMapper();
    static final String QUESTION = "What is the weather in Paris?";

    enum City { PARIS, TOKYO, LIMA }

    /** A bounded parameter (an enum) keeps a random-weight model's call short. */
    static final class WeatherTools {
        final List<City> cities = Collections.synchronizedList(new ArrayList<>());

        @Tool(description = "Current weather of a city")
        String currentWeather(@ToolParam(description = "the city") City city) {
            cities.add(city);
            return "sunny, 21 degrees in " + city;
        }
    }

    @BeforeAll
    static void open() {
        model = Fixtures.toolModel(dir);
        llb = LlbChatModel.builder().config(Fixtures.config(model).withContextSize(4096)).parallel(4)
                .defaultOptions(LlbChatOptions.builder().temperature(0.0).seed(42L).maxTokens(64).parallelToolCalls(false).build()).build();
    }

    @AfterAll
    static void close() {
        llb.close();
    }

    static LlbChatOptions forced(ToolCallback... tools) {
        return LlbChatOptions.builder().toolChoice("required").parallelToolCalls(false).toolCallbacks(tools).build();
    }

    /** The one call of {@code response}, run through Spring AI's own callback: it must accept the arguments. */
    static AssistantMessage.ToolCall checkCall(ChatResponse response, ToolCallback callback, WeatherTools tools) throws Exception {
        List<AssistantMessage.ToolCall> calls = response.getResult().getOutput().getToolCalls();
        assertEquals(1, calls.size(), calls.toString());
        AssistantMessage.ToolCall call = calls.get(0);
        assertEquals("currentWeather", call.name());
        assertFalse(call.id().isBlank(), call.toString());
        JsonNode arguments = JSON.readTree(call.arguments());
        assertEquals(Set.of("city"), Set.copyOf(iterable(arguments.fieldNames())), call.arguments());
        assertTrue(Set.of("PARIS", "TOKYO", "LIMA").contains(arguments.path("city").asText()), call.arguments());
        String result = callback.call(call.arguments());
        assertEquals(1, tools.cities.size());
        assertTrue(result.contains(tools.cities.get(0).name()), result);
        return call;
    }

    private static <T> List<T> iterable(java.util.Iterator<T> it) {
        List<T> list = new ArrayList<>();
        it.forEachRemaining(list::add);
        return list;
    }

    @Test
    void callReturnsAForcedToolCallWhoseArgumentsValidate() throws Exception {
        WeatherTools tools = new WeatherTools();
        ToolCallback callback = ToolCallbacks.from(tools)[0];
        ChatResponse response = llb.call(new Prompt(QUESTION, forced(callback)));

        checkCall(response, callback, tools);
        assertEquals("TOOL_CALLS", response.getResult().getMetadata().getFinishReason());
        Usage usage = response.getMetadata().getUsage();
        assertTrue(usage.getPromptTokens() > 0 && usage.getCompletionTokens() > 0, usage.toString());
        assertEquals(usage.getPromptTokens() + usage.getCompletionTokens(), usage.getTotalTokens());
        assertNotNull(usage.getCacheReadInputTokens(), "llb reports cached_tokens");
        assertTrue(response.getMetadata().getId().startsWith("chatcmpl"), response.getMetadata().getId());
        assertEquals("tools.gguf", response.getMetadata().getModel());
    }

    @Test
    void streamDeliversTheForcedCallWholeThenTheFinishReasonAndUsage() throws Exception {
        WeatherTools tools = new WeatherTools();
        ToolCallback callback = ToolCallbacks.from(tools)[0];
        List<ChatResponse> responses = llb.stream(new Prompt(QUESTION, forced(callback))).collectList().block();

        assertNotNull(responses);
        List<ChatResponse> withCalls = responses.stream().filter(ChatResponse::hasToolCalls).toList();
        assertEquals(1, withCalls.size(), "the call comes whole, once: " + responses);
        checkCall(withCalls.get(0), callback, tools);
        ChatResponse last = responses.get(responses.size() - 1);
        assertEquals("TOOL_CALLS", last.getResult().getMetadata().getFinishReason());
        assertTrue(last.getMetadata().getUsage().getCompletionTokens() > 0, last.getMetadata().toString());
    }

    @Test
    void streamedTextArrivesAsDeltas() {
        LlbChatOptions options = LlbChatOptions.builder().maxTokens(12).build();
        List<ChatResponse> responses = llb.stream(new Prompt("Say something.", options)).collectList().block();

        assertNotNull(responses);
        List<String> deltas = responses.stream().map(r -> r.getResult().getOutput().getText())
                .filter(t -> t != null && !t.isEmpty()).toList();
        ChatResponse last = responses.get(responses.size() - 1);
        assertEquals("LENGTH", last.getResult().getMetadata().getFinishReason());
        assertEquals(12, last.getMetadata().getUsage().getCompletionTokens());
        assertTrue(deltas.size() > 1, "text comes in pieces as generated: " + deltas);
    }

    /** Records the prompts a {@code ChatClient} sends, and passes them on. */
    static final class Recording implements ChatModel {
        final ChatModel model;
        final List<Prompt> prompts = Collections.synchronizedList(new ArrayList<>());

        Recording(ChatModel model) {
            this.model = model;
        }

        @Override
        public ChatResponse call(Prompt prompt) {
            prompts.add(prompt);
            return model.call(prompt);
        }

        @Override
        public Flux<ChatResponse> stream(Prompt prompt) {
            prompts.add(prompt);
            return model.stream(prompt);
        }

        @Override
        public ChatOptions getOptions() {
            return model.getOptions();
        }
    }

    /** What a ChatClient tool round trip must show: one tool run, its result sent back under the call's id, then an answer. */
    static void checkRoundTrip(WeatherTools tools, Recording recording) {
        assertEquals(1, tools.cities.size(), "the tool ran once");
        assertEquals(2, recording.prompts.size(), "the model was called twice");
        List<Message> second = recording.prompts.get(1).getInstructions();
        AssistantMessage call = assertInstanceOf(AssistantMessage.class, second.get(second.size() - 2));
        ToolResponseMessage result = assertInstanceOf(ToolResponseMessage.class, second.get(second.size() - 1));
        assertEquals(call.getToolCalls().get(0).id(), result.getResponses().get(0).id());
        assertEquals("\"sunny, 21 degrees in " + tools.cities.get(0) + "\"", result.getResponses().get(0).responseData());
    }

    @Test
    void chatClientRunsToolMethodsAndTheModelAnswersWithTheResult() {
        WeatherTools tools = new WeatherTools();
        Recording recording = new Recording(llb);
        ChatResponse response = ChatClient.create(recording).prompt().user(QUESTION)
                .options(LlbChatOptions.builder().toolChoice("currentWeather").toolChoiceAfterTools("none"))
                .tools(tools).call().chatResponse();

        checkRoundTrip(tools, recording);
        assertNotNull(response);
        assertFalse(response.hasToolCalls(), response.toString());
        assertTrue(Set.of("STOP", "LENGTH").contains(response.getResult().getMetadata().getFinishReason()), response.toString());
        // The second turn's prompt starts with the first turn's: llb reused it from the KV cache.
        assertTrue(response.getMetadata().getUsage().getCacheReadInputTokens() > 0, response.getMetadata().toString());
    }

    @Test
    void chatClientContentWithDefaultOptionsAndAStream() {
        // The one-liner of the README, with the forcing in the model's default options.
        try (LlbChatModel forcing = LlbChatModel.builder().pool(llb.pool()).defaultOptions(llb.getOptions().mutate()
                .toolChoice("required").toolChoiceAfterTools("none").build()).build()) {
            WeatherTools tools = new WeatherTools();
            String content = ChatClient.create(forcing).prompt().user(QUESTION).tools(tools).call().content();
            assertNotNull(content);
            assertEquals(1, tools.cities.size());

            WeatherTools streamed = new WeatherTools();
            Recording recording = new Recording(forcing);
            List<String> parts = ChatClient.create(recording).prompt().user(QUESTION).tools(streamed).stream().content()
                    .collectList().block();
            assertNotNull(parts);
            checkRoundTrip(streamed, recording);
        }
        assertFalse(llb.pool().isClosed(), "a model over a given pool leaves it open");
    }

    @Test
    void withInternalToolExecutionTheModelRunsTheToolLoopItself() {
        LlbChatOptions.Builder internal = LlbChatOptions.builder().toolChoice("required").toolChoiceAfterTools("none")
                .internalToolExecutionEnabled(true);
        WeatherTools tools = new WeatherTools();
        ChatResponse response = llb.call(new Prompt(QUESTION, internal.toolCallbacks(List.of(ToolCallbacks.from(tools))).build()));
        assertEquals(1, tools.cities.size(), "the model ran the tool");
        assertFalse(response.hasToolCalls(), "and answered after it: " + response);

        WeatherTools streamed = new WeatherTools();
        List<ChatResponse> responses = llb.stream(new Prompt(QUESTION, internal.toolCallbacks(List.of(ToolCallbacks.from(streamed))).build()))
                .collectList().block();
        assertNotNull(responses);
        assertEquals(1, streamed.cities.size());
        assertEquals(1, responses.stream().filter(ChatResponse::hasToolCalls).count(), "the call, then the answer's deltas");
        assertFalse(responses.get(responses.size() - 1).hasToolCalls());
        assertTrue(Set.of("STOP", "LENGTH").contains(responses.get(responses.size() - 1).getResult().getMetadata().getFinishReason()));

        // A model that never stops calling is stopped.
        WeatherTools looping = new WeatherTools();
        try (LlbChatModel bounded = LlbChatModel.builder().pool(llb.pool()).defaultOptions(llb.getOptions()).maxToolRounds(3).build()) {
            NonTransientAiException e = assertThrows(NonTransientAiException.class, () -> bounded.call(new Prompt(QUESTION,
                    internal.toolChoiceAfterTools("required").toolCallbacks(List.of(ToolCallbacks.from(looping))).build())));
            assertTrue(e.getMessage().contains("3 rounds"), e.getMessage());
        }
        assertEquals(2, looping.cities.size(), "two rounds ran their tool, the third call was refused");
    }

    @Test
    void sixteenConcurrentChatClientCallsOnOneModel() throws Exception {
        ChatClient client = ChatClient.builder(llb)
                .defaultOptions(LlbChatOptions.builder().toolChoice("required").toolChoiceAfterTools("none").maxTokens(32)).build();
        AtomicBoolean done = new AtomicBoolean();
        AtomicInteger maxRunning = new AtomicInteger();
        Thread watcher = Thread.ofPlatform().start(() -> {
            while (!done.get()) {
                try {
                    int running = JSON.readTree(llb.pool().stats()).path("running").asInt();
                    maxRunning.accumulateAndGet(running, Math::max);
                    Thread.sleep(2);
                } catch (Exception e) {
                    return;
                }
            }
        });
        List<WeatherTools> tools = new ArrayList<>();
        List<Future<String>> answers = new ArrayList<>();
        long start = System.nanoTime();
        try (ExecutorService threads = Executors.newFixedThreadPool(16)) {
            for (int i = 0; i < 16; i++) {
                WeatherTools t = new WeatherTools();
                tools.add(t);
                String city = City.values()[i % 3].name();
                answers.add(threads.submit(() -> client.prompt().user("What is the weather in " + city + "?").tools(t).call().content()));
            }
            for (Future<String> answer : answers) {
                assertNotNull(answer.get(300, TimeUnit.SECONDS));
            }
        } finally {
            done.set(true);
            watcher.join();
        }
        System.out.printf("16 concurrent ChatClient tool round trips: %.1f s, at most %d running at once%n",
                (System.nanoTime() - start) / 1e9, maxRunning.get());
        for (WeatherTools t : tools) {
            assertEquals(1, t.cities.size(), "each conversation ran its own tool once");
        }
        assertTrue(maxRunning.get() > 1, "the pool decoded requests side by side: " + maxRunning.get());
    }

    @Test
    void llbErrorsAreSpringAiExceptionsThatKeepLlbsCode() {
        LlbChatOptions bad = LlbChatOptions.builder().extraBody(Map.of("n", 3)).build();
        NonTransientAiException e = assertThrows(NonTransientAiException.class, () -> llb.call(new Prompt("hi", bad)));
        LlbException cause = assertInstanceOf(LlbException.class, e.getCause());
        assertEquals("invalid_argument", cause.code());
        assertTrue(e.getMessage().startsWith("llb invalid_argument: "), e.getMessage());
        // The same through stream().
        Throwable streamed = assertThrows(NonTransientAiException.class, () -> llb.stream(new Prompt("hi", bad)).blockLast());
        assertEquals("invalid_argument", ((LlbException) streamed.getCause()).code());

        NonTransientAiException missing = assertThrows(NonTransientAiException.class,
                () -> LlbChatModel.builder().modelPath(dir.resolve("missing.gguf")).build());
        assertEquals("file_not_found", ((LlbException) missing.getCause()).code());

        NonTransientAiException refused = assertThrows(NonTransientAiException.class,
                () -> LlbChatModel.builder().config(Fixtures.config(Fixtures.plainModel(dir))).build());
        ToolsUnsupportedException why = assertInstanceOf(ToolsUnsupportedException.class, refused.getCause());
        assertTrue(refused.getMessage().contains(why.getMessage()), refused.getMessage());
        assertFalse(why.caps().get("supports_tools"));
    }
}
