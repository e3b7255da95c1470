package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.agent.tool.ToolSpecification;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ToolChoice;
import dev.langchain4j.model.chat.request.json.JsonObjectSchema;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.chat.response.CompleteToolCall;
import dev.langchain4j.model.chat.response.PartialThinking;
import dev.langchain4j.model.chat.response.PartialToolCall;
import dev.langchain4j.model.chat.response.StreamingChatResponseHandler;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The streaming model as LangChain4j's own stream: each tool call complete as soon as the next
 * begins, reasoning only with {@code returnThinking}, and a pool by default (calls run at once).
 */
class StreamingParityTest {
    @TempDir
    static Path dir;

    static final ToolSpecification WEATHER = ToolSpecification.builder().name("get_weather").description("Weather of a city")
            .parameters(JsonObjectSchema.builder().addEnumProperty("city", List.of("Paris", "Lima")).required("city").build())
            .build();

    /** Records the handler's events in order ("partial 0", "complete 0", ...) and the response. */
    static class Recorder implements StreamingChatResponseHandler {
        final List<String> events = Collections.synchronizedList(new ArrayList<>());
        final List<CompleteToolCall> completed = Collections.synchronizedList(new ArrayList<>());
        final StringBuilder thinking = new StringBuilder();
        final CompletableFuture<ChatResponse> done = new CompletableFuture<>();

        @Override
        public void onPartialResponse(String partialResponse) {}

        @Override
        public void onPartialThinking(PartialThinking partialThinking) {
            thinking.append(partialThinking.text());
        }

        @Override
        public void onPartialToolCall(PartialToolCall call) {
            events.add("partial " + call.index());
        }

        @Override
        public void onCompleteToolCall(CompleteToolCall call) {
            events.add("complete " + call.index());
            completed.add(call);
        }

        @Override
        public void onCompleteResponse(ChatResponse response) {
            done.complete(response);
        }

        @Override
        public void onError(Throwable error) {
            done.completeExceptionally(error);
        }

        ChatResponse response() throws Exception {
            return done.get(60, TimeUnit.SECONDS);
        }
    }

    @Test
    void eachToolCallCompletesBeforeTheNextOnesFirstPartial() throws Exception {
        try (LlbStreamingChatModel model = LlbStreamingChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir)))
                .parallel(1).strictTools(true).parallelToolCalls(true).temperature(1.0).maxTokens(160).build()) {
            // Random weights choose how many calls a reply holds: take the first seed that makes two or more.
            for (long seed = 1; seed <= 40; seed++) {
                Recorder r = new Recorder();
                model.chat(ChatRequest.builder().messages(UserMessage.from("Weather in Paris and Lima?"))
                        .parameters(LlbChatRequestParameters.builder().toolSpecifications(WEATHER).toolChoice(ToolChoice.REQUIRED)
                                .seed(seed).build()).build(), r);
                List<ToolExecutionRequest> calls = r.response().aiMessage().toolExecutionRequests();
                if (calls.size() < 2) {
                    continue;
                }
                for (int i = 1; i < calls.size(); i++) {
                    int complete = r.events.indexOf("complete " + (i - 1));
                    int nextPartial = r.events.indexOf("partial " + i);
                    assertTrue(complete >= 0 && complete < nextPartial, "call " + (i - 1) + " completes before call " + i
                            + "'s first partial: " + r.events);
                }
                assertEquals(calls.size(), r.completed.size(), r.events.toString());
                for (int i = 0; i < calls.size(); i++) {
                    assertEquals(i, r.completed.get(i).index());
                    assertEquals(calls.get(i), r.completed.get(i).toolExecutionRequest(), "the call handed early is the reply's");
                }
                return;
            }
            fail("no seed of 1 to 40 made two tool calls");
        }
    }

    @Test
    void reasoningIsReturnedOnlyWithReturnThinking() throws Exception {
        Path r1 = Fixtures.reasoningModel(dir);
        for (boolean returnThinking : new boolean[] {false, true}) {
            try (LlbStreamingChatModel streaming = LlbStreamingChatModel.builder().config(Fixtures.config(r1)).parallel(1)
                    .returnThinking(returnThinking).maxTokens(24).seed(8L).build();
                    LlbChatModel chat = LlbChatModel.builder().config(Fixtures.config(r1)).parallel(1)
                            .returnThinking(returnThinking).maxTokens(24).seed(8L).build()) {
                Recorder r = new Recorder();
                streaming.chat(ChatRequest.builder().messages(UserMessage.from("Think first.")).build(), r);
                String streamed = r.response().aiMessage().thinking();
                String called = chat.chat(ChatRequest.builder().messages(UserMessage.from("Think first.")).build())
                        .aiMessage().thinking();
                if (returnThinking) {
                    assertFalse(r.thinking.isEmpty(), "onPartialThinking");
                    assertEquals(r.thinking.toString(), streamed);
                    assertTrue(called != null && !called.isEmpty());
                } else {
                    assertEquals("", r.thinking.toString(), "no onPartialThinking");
                    assertNull(streamed);
                    assertNull(called);
                }
            }
        }
    }

    @Test
    void aModelFromAConfigRunsCallsAtOnce() throws Exception {
        CyclicBarrier both = new CyclicBarrier(2);
        try (LlbStreamingChatModel model = LlbStreamingChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir)))
                .parallel(2).maxTokens(8).build()) {
            List<Recorder> recorders = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                Recorder r = new Recorder() {
                    private boolean met;

                    @Override
                    public void onPartialResponse(String partialResponse) {
                        if (!met) {
                            met = true;
                            try {
                                // Both streams must be generating at once to pass: on one engine the
                                // second would wait for the first, which waits here.
                                both.await(30, TimeUnit.SECONDS);
                            } catch (Exception e) {
                                throw new IllegalStateException("the two calls did not run at once", e);
                            }
                        }
                    }
                };
                recorders.add(r);
                model.chat(ChatRequest.builder().messages(UserMessage.from("Story " + i)).build(), r);
            }
            for (Recorder r : recorders) {
                r.response();
            }
        }
    }
}
