package dev.llb.langchain4j;

import com.fasterxml.jackson.databind.JsonNode;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.model.chat.StreamingChatModel;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.chat.response.CompleteToolCall;
import dev.langchain4j.model.chat.response.PartialResponse;
import dev.langchain4j.model.chat.response.PartialResponseContext;
import dev.langchain4j.model.chat.response.PartialThinking;
import dev.langchain4j.model.chat.response.PartialThinkingContext;
import dev.langchain4j.model.chat.response.PartialToolCall;
import dev.langchain4j.model.chat.response.PartialToolCallContext;
import dev.langchain4j.model.chat.response.StreamingChatResponseHandler;
import dev.langchain4j.model.chat.response.StreamingHandle;
import dev.llb.CancellationToken;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.ThreadFactory;

/**
 * A LangChain4j {@link StreamingChatModel} backed by an llb pool in this process; pool,
 * threads, retries and errors as {@link LlbModel} says. llb's chunks reach the handler as they are
 * generated: text as {@code onPartialResponse}, reasoning as {@code onPartialThinking} (with
 * {@link LlbModelBuilder#returnThinking returnThinking}), tool-call arguments as
 * {@code onPartialToolCall} (with the call's index, id and name). Each call goes to
 * {@code onCompleteToolCall} as soon as it is complete: when the next call's first chunk arrives,
 * the last one when generation ends. Then the whole response goes to {@code onCompleteResponse},
 * whose message is exactly what the events add up to.
 *
 * <p>{@code chat} returns at once; the generation runs on the builder's {@link Builder#executor}
 * (default: a new daemon thread per request), and the handler is called on that thread. An
 * exception thrown by a partial callback cancels the generation and goes to {@code onError}.
 * The partial callbacks' contexts carry a {@code StreamingHandle}: {@code cancel()} stops the
 * generation (llb sees it at its next chunk), and the handler gets no callback after it.
 *
 * <pre>{@code
 * try (LlbStreamingChatModel model = LlbStreamingChatModel.builder()
 *         .config(ChatConfig.of(Path.of("qwen2.5-7b-instruct-q4_k_m.gguf")).withContextSize(8192))
 *         .build()) {
 *     Assistant assistant = AiServices.builder(Assistant.class).streamingChatModel(model).tools(new WeatherTools()).build();
 *     assistant.chat("Weather in Paris?").onPartialResponse(System.out::print).onCompleteResponse(done).onError(failed).start();
 * }
 * }</pre>
 */
public final class LlbStreamingChatModel extends LlbModel implements StreamingChatModel {
    private final Executor executor;

    private LlbStreamingChatModel(Builder b) {
        super(b);
        this.executor = b.executor != null ? b.executor : Builder.DEFAULT_EXECUTOR;
    }

    /**
     * A new builder.
     *
     * @return the builder
     */
    public static Builder builder() {
        return new Builder();
    }

    @Override
    public void doChat(ChatRequest request, StreamingChatResponseHandler handler) {
        Objects.requireNonNull(handler, "handler");
        String json;
        try {
            json = Mapping.request(request, style);
        } catch (RuntimeException e) {
            handler.onError(e);
            return;
        }
        executor.execute(() -> run(json, handler));
    }

    private void run(String json, StreamingChatResponseHandler handler) {
        Chunks chunks = new Chunks(handler, style.returnThinking());
        ChatResponse response = null;
        Throwable failure = null;
        try {
            String completion = attempts.run(engines, (chat, token) -> chat.stream(json, chunks::accept, token), chunks.token);
            response = Mapping.response(completion, engines.modelName, style.returnThinking());
        } catch (RuntimeException | Error e) {
            // llb's error (already LangChain4j's), a timeout, or thrown by a partial callback (the
            // generation was cancelled), or the pool was closed
            failure = e;
        }
        if (chunks.isCancelled() && failure == null) {
            return; // cancelled through the StreamingHandle: no callbacks after cancel()
        }
        if (failure != null) {
            handler.onError(failure);
            return;
        }
        try {
            var calls = response.aiMessage().toolExecutionRequests();
            for (int i = chunks.completed; i < calls.size(); i++) {
                handler.onCompleteToolCall(new CompleteToolCall(i, calls.get(i)));
            }
            handler.onCompleteResponse(response);
        } catch (RuntimeException | Error e) {
            // Nobody else would see it on this thread (AiServices runs tools and the next turn in here).
            handler.onError(e);
        }
    }

    /**
     * One request's {@code chat.completion.chunk}s to the handler's partial callbacks. Their
     * contexts' {@link StreamingHandle} cancels the generation (llb sees it at its next event);
     * after {@code cancel()} the handler gets no more callbacks.
     */
    private static final class Chunks implements StreamingHandle {
        final CancellationToken token = new CancellationToken();
        private final StreamingChatResponseHandler handler;
        private final boolean returnThinking;
        private final Map<Integer, String> ids = new HashMap<>();
        private final Map<Integer, String> names = new HashMap<>();
        private final Map<Integer, StringBuilder> arguments = new HashMap<>();
        /** Calls 0 to completed - 1 went to onCompleteToolCall. */
        int completed;
        /** Set once cancel() was called on this handle (not by a timeout). */
        private volatile boolean cancelled;

        Chunks(StreamingChatResponseHandler handler, boolean returnThinking) {
            this.handler = handler;
            this.returnThinking = returnThinking;
        }

        @Override
        public void cancel() {
            cancelled = true;
            token.cancel();
        }

        @Override
        public boolean isCancelled() {
            return cancelled;
        }

        void accept(String chunkJson) {
            JsonNode delta = Mapping.parse(chunkJson).path("choices").path(0).path("delta");
            String thinking = returnThinking ? delta.path("reasoning_content").asText("") : "";
            if (!thinking.isEmpty() && !token.isCancelled()) {
                handler.onPartialThinking(new PartialThinking(thinking), new PartialThinkingContext(this));
            }
            String content = delta.path("content").asText("");
            if (!content.isEmpty() && !token.isCancelled()) {
                handler.onPartialResponse(new PartialResponse(content), new PartialResponseContext(this));
            }
            for (JsonNode call : delta.path("tool_calls")) {
                toolCall(call);
            }
        }

        /** One tool call's delta; the first delta of call n completes the calls before it. */
        private void toolCall(JsonNode call) {
            int index = call.path("index").asInt();
            completeBefore(index);
            if (call.path("id").isTextual()) {
                ids.put(index, call.path("id").asText());
            }
            JsonNode function = call.path("function");
            if (function.path("name").isTextual()) {
                names.merge(index, function.path("name").asText(), String::concat);
            }
            String partial = function.path("arguments").asText("");
            arguments.computeIfAbsent(index, i -> new StringBuilder()).append(partial);
            if (!partial.isEmpty() && !token.isCancelled()) {
                handler.onPartialToolCall(PartialToolCall.builder().index(index).id(ids.get(index))
                        .name(names.get(index)).partialArguments(partial).build(), new PartialToolCallContext(this));
            }
        }

        /** Hands the calls before {@code index} that are not yet complete to {@code onCompleteToolCall}. */
        private void completeBefore(int index) {
            for (; completed < index && !token.isCancelled(); completed++) {
                StringBuilder args = arguments.get(completed);
                handler.onCompleteToolCall(new CompleteToolCall(completed, ToolExecutionRequest.builder()
                        .id(ids.get(completed)).name(names.get(completed))
                        .arguments(args == null ? "{}" : args.toString()).build()));
            }
        }
    }

    /** Builds an {@link LlbStreamingChatModel}: {@link #config config} or {@link #engine engine}, the rest optional. */
    public static final class Builder extends LlbModelBuilder<Builder, LlbStreamingChatModel> {
        private static final ThreadFactory THREADS = Thread.ofPlatform().name("llb-stream-", 0).daemon().factory();
        static final Executor DEFAULT_EXECUTOR = task -> THREADS.newThread(task).start();

        private Executor executor;

        private Builder() {}

        @Override
        Builder self() {
            return this;
        }

        /**
         * Where generations run; the handler is called there.
         *
         * @param executor default: a new daemon thread per request
         * @return this builder
         */
        public Builder executor(Executor executor) {
            this.executor = executor;
            return this;
        }

        @Override
        LlbStreamingChatModel create() {
            return new LlbStreamingChatModel(this);
        }
    }
}
