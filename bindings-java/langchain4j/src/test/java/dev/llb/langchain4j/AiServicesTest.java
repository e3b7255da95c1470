package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.langchain4j.agent.tool.P;
import dev.langchain4j.agent.tool.Tool;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.memory.chat.MessageWindowChatMemory;
import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.langchain4j.model.chat.listener.ChatModelRequestContext;
import dev.langchain4j.model.chat.listener.ChatModelResponseContext;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.ToolChoice;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.output.FinishReason;
import dev.langchain4j.service.AiServices;
import dev.langchain4j.service.Result;
import dev.langchain4j.service.TokenStream;
import dev.langchain4j.service.tool.ToolExecution;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * LangChain4j's own {@code AiServices} with a {@code @Tool} on a fixture model, sync and streamed:
 * the model calls the tool, AiServices runs it and sends its result back, and the second turn
 * reuses the first turn's KV cache.
 *
 * <p>A random-weight model never chooses a tool by itself, so the first turn of each question is
 * sent with {@link ToolChoice#REQUIRED} (through AiServices' own {@code chatRequestTransformer});
 * the turn after the tool result keeps the default ({@code AUTO}).
 */
class AiServicesTest {
    @TempDir
    static Path dir;

    static Path model;

    @BeforeAll
    static void fixture() {
        model = Fixtures.toolModel(dir);
    }

    static final String WEATHER = "sunny, 21 degrees";

    enum City { PARIS, TOKYO, LIMA }

    /** A bounded parameter (an enum) keeps a random-weight model's call short. */
    static final class WeatherTools {
        final List<City> cities = Collections.synchronizedList(new ArrayList<>());

        @Tool("Current weather of a city")
        String currentWeather(@P("the city") City city) {
            cities.add(city);
            return WEATHER;
        }
    }

    interface Assistant {
        Result<String> chat(String message);
    }

    interface StreamingAssistant {
        TokenStream chat(String message);
    }

    /** Requests as the model received them, and each turn's own response (AiServices' last response sums the usage). */
    static final class Requests implements ChatModelListener {
        final List<ChatRequest> seen = Collections.synchronizedList(new ArrayList<>());
        final List<ChatResponse> answered = Collections.synchronizedList(new ArrayList<>());

        @Override
        public void onRequest(ChatModelRequestContext context) {
            seen.add(context.chatRequest());
        }

        @Override
        public void onResponse(ChatModelResponseContext context) {
            answered.add(context.chatResponse());
        }
    }

    static ChatRequest requireToolOnUserTurns(ChatRequest request) {
        List<ChatMessage> messages = request.messages();
        if (!(messages.get(messages.size() - 1) instanceof UserMessage)) {
            return request;
        }
        return request.toBuilder().parameters(request.parameters().overrideWith(
                ChatRequestParameters.builder().toolChoice(ToolChoice.REQUIRED).build())).build();
    }

    static ChatRequestParameters parameters() {
        return ChatRequestParameters.builder().temperature(0.0).maxOutputTokens(96).build();
    }

    @Test
    void aToolCallRoundTripThroughAiServices() {
        WeatherTools tools = new WeatherTools();
        Requests requests = new Requests();
        try (LlbChatModel llb = LlbChatModel.builder().config(Fixtures.config(model)).seed(42L).strictTools(true).parallelToolCalls(false)
                .defaultRequestParameters(parameters()).listeners(List.of(requests)).build()) {
            Assistant assistant = AiServices.builder(Assistant.class).chatModel(llb).tools(tools)
                    .chatMemory(MessageWindowChatMemory.withMaxMessages(20))
                    .chatRequestTransformer(AiServicesTest::requireToolOnUserTurns).build();
            Result<String> result = assistant.chat("What is the weather in Paris?");

            ToolExecutionRequest call = checkToolRoundTrip(tools, requests, result.toolExecutions(),
                    result.intermediateResponses(), result.finalResponse());
            assertNotNull(call);
            assertEquals(result.finalResponse().aiMessage().text(), result.content());
        }
    }

    @Test
    void aToolCallRoundTripThroughStreamingAiServices() throws Exception {
        WeatherTools tools = new WeatherTools();
        Requests requests = new Requests();
        try (LlbStreamingChatModel llb = LlbStreamingChatModel.builder().config(Fixtures.config(model)).seed(42L).strictTools(true).parallelToolCalls(false)
                .defaultRequestParameters(parameters()).listeners(List.of(requests)).build()) {
            StreamingAssistant assistant = AiServices.builder(StreamingAssistant.class).streamingChatModel(llb).tools(tools)
                    .chatMemory(MessageWindowChatMemory.withMaxMessages(20))
                    .chatRequestTransformer(AiServicesTest::requireToolOnUserTurns).build();
            List<ToolExecution> executions = Collections.synchronizedList(new ArrayList<>());
            List<ChatResponse> intermediate = Collections.synchronizedList(new ArrayList<>());
            StringBuilder partial = new StringBuilder();
            CompletableFuture<ChatResponse> done = new CompletableFuture<>();
            assistant.chat("What is the weather in Paris?")
                    .onPartialResponse(partial::append)
                    .onIntermediateResponse(intermediate::add)
                    .onToolExecuted(executions::add)
                    .onCompleteResponse(done::complete)
                    .onError(done::completeExceptionally)
                    .start();
            ChatResponse last = done.get(120, TimeUnit.SECONDS);

            checkToolRoundTrip(tools, requests, executions, intermediate, last);
            String text = last.aiMessage().text();
            assertEquals(text == null ? "" : text, partial.toString(), "the partial responses add up to the final text");
        }
    }

    /** What both flavours must show; returns the model's tool call. */
    private static ToolExecutionRequest checkToolRoundTrip(WeatherTools tools, Requests requests, List<ToolExecution> executions,
            List<ChatResponse> intermediate, ChatResponse last) {
        // The model called the tool, and AiServices ran it with the model's arguments.
        assertEquals(1, executions.size(), executions.toString());
        ToolExecutionRequest call = executions.get(0).request();
        assertEquals("currentWeather", call.name());
        assertTrue(call.id() != null && !call.id().isBlank(), call.toString());
        assertEquals(1, tools.cities.size());
        assertEquals(WEATHER, executions.get(0).result());
        assertEquals(1, intermediate.size());
        ChatResponse first = intermediate.get(0);
        assertEquals(FinishReason.TOOL_EXECUTION, first.finishReason());
        assertEquals(List.of(call), first.aiMessage().toolExecutionRequests());

        // The second request carried the tool's result under the call's id.
        assertEquals(2, requests.seen.size());
        ChatRequest second = requests.seen.get(1);
        ToolExecutionResultMessage toolResult = assertInstanceOf(ToolExecutionResultMessage.class,
                second.messages().get(second.messages().size() - 1));
        assertEquals(call.id(), toolResult.id());
        assertEquals(WEATHER, toolResult.text());

        // The second turn answered (no second tool call) and reused the whole first prompt from the KV cache.
        assertTrue(Set.of(FinishReason.STOP, FinishReason.LENGTH).contains(last.finishReason()), String.valueOf(last.finishReason()));
        assertTrue(last.aiMessage().toolExecutionRequests().isEmpty(), last.aiMessage().toString());
        assertEquals(2, requests.answered.size());
        assertEquals(first.tokenUsage(), requests.answered.get(0).tokenUsage());
        LlbTokenUsage firstUsage = assertInstanceOf(LlbTokenUsage.class, requests.answered.get(0).tokenUsage());
        LlbTokenUsage secondUsage = assertInstanceOf(LlbTokenUsage.class, requests.answered.get(1).tokenUsage());
        assertEquals(last.aiMessage(), requests.answered.get(1).aiMessage());
        System.out.println("AiServicesTest usage: turn 1 " + firstUsage + ", turn 2 " + secondUsage);
        assertEquals(0, firstUsage.cachedTokens(), "a fresh engine has nothing cached");
        assertTrue(secondUsage.inputTokenCount() > firstUsage.inputTokenCount(), secondUsage + " vs " + firstUsage);
        // Turn 2's prompt is turn 1's prompt, the model's tool call and the tool result: all of turn 1 is reused.
        assertTrue(secondUsage.cachedTokens() >= firstUsage.inputTokenCount(),
                "turn 2 should reuse turn 1's prompt: " + secondUsage + " vs " + firstUsage);
        assertTrue(secondUsage.cachedTokens() < secondUsage.inputTokenCount(), "the tool result is new: " + secondUsage);
        return call;
    }
}
