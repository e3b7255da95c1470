package dev.llb.springai;

import dev.llb.CancellationToken;
import dev.llb.ChatConfig;
import dev.llb.ChatPool;
import dev.llb.Deadline;
import dev.llb.LlbException;
import io.micrometer.observation.Observation;
import io.micrometer.observation.ObservationRegistry;
import io.micrometer.observation.contextpropagation.ObservationThreadLocalAccessor;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.BiFunction;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.model.Generation;
import org.springframework.ai.chat.observation.ChatModelObservationContext;
import org.springframework.ai.chat.observation.ChatModelObservationConvention;
import org.springframework.ai.chat.observation.ChatModelObservationDocumentation;
import org.springframework.ai.chat.observation.DefaultChatModelObservationConvention;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.model.tool.ToolCallingChatOptions;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.ai.model.tool.ToolExecutionResult;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.retry.RetryUtils;
import org.springframework.ai.tool.ToolCallback;
import org.springframework.ai.tool.definition.ToolDefinition;
import org.springframework.core.retry.RetryTemplate;
import reactor.core.publisher.Flux;
import reactor.core.publisher.FluxSink;
import reactor.core.scheduler.Scheduler;
import reactor.core.scheduler.Schedulers;

/**
 * A Spring AI {@link ChatModel} backed by an llb {@link ChatPool} in this process: no server, no
 * HTTP. One model serves any number of threads at once: up to {@link Builder#parallel parallel}
 * requests decode together in one batched llama.cpp context, the rest wait for a turn.
 *
 * <pre>{@code
 * try (LlbChatModel model = LlbChatModel.builder().modelPath(Path.of("qwen2.5-7b-instruct-q4_k_m.gguf")).build()) {
 *     String answer = ChatClient.create(model).prompt().user("Weather in Paris?").tools(new WeatherTools()).call().content();
 * }
 * }</pre>
 *
 * <p><b>Tools</b> work as with Spring AI's OpenAI model at 2.0: the request carries the
 * definitions of the options' tool callbacks (resolved by the {@link ToolCallingManager}), and the
 * response carries the tool calls the model generated (llb parses them with the model's own chat
 * template); {@code ChatClient}'s tool-calling advisor runs them and calls the model again. With
 * {@link LlbChatOptions#getInternalToolExecutionEnabled()} the model runs that loop itself.
 *
 * <p><b>{@link #stream(Prompt)}</b> emits text and reasoning deltas as llb generates them, each tool
 * call once its arguments are complete, and last a response with the finish reason and usage. The
 * native call runs on the builder's {@link Builder#streamScheduler scheduler} (Reactor's
 * bounded-elastic by default); cancelling the subscription cancels the generation. The stream
 * honours backpressure: while the subscriber has no demand left, the request's decoding pauses
 * (it keeps its place in the pool; other requests go on), so nothing is buffered without limit.
 * Closing the pool ends such a paused request.
 *
 * <p><b>Metadata</b>: usage (prompt, completion, total tokens; {@code cacheReadInputTokens} is
 * llb's {@code cached_tokens}, the prompt prefix reused from the KV cache), the finish reason in
 * the generation metadata ({@code STOP}, {@code LENGTH}, {@code TOOL_CALLS}, as Spring AI's OpenAI
 * model reports them), the reasoning text in the assistant message's {@code reasoningContent}
 * property.
 *
 * <p><b>Observations</b>: with an {@link Builder#observationRegistry ObservationRegistry} every
 * model call (each {@link #call} and each {@link #stream}, and each round of a tool loop the model
 * runs itself) is one Spring AI {@code gen_ai.client.operation} observation
 * ({@link ChatModelObservationDocumentation#CHAT_MODEL_OPERATION}, {@link ChatModelObservationContext},
 * {@link DefaultChatModelObservationConvention} unless {@link Builder#observationConvention} gives
 * another), as Spring AI's OpenAI and Ollama models record them: operation {@code chat}, provider
 * {@code llb}, the request model (the {@link Builder#modelName model name} unless the options name
 * one), temperature, max tokens and the other request options, finish reasons, response id and
 * usage (input, output, total, cache-read tokens). Spring AI's {@code ChatModelMeterObservationHandler}
 * turns them into {@code gen_ai.client.token.usage} meters, and Micrometer's timer handler into
 * {@code gen_ai.client.operation} timers; a tracing handler makes them spans. A streamed call's
 * observation ends when the stream does (completed, failed or cancelled) and carries the whole
 * reply. The Boot auto-configuration passes the application's registry.
 *
 * <p><b>Structured output</b>: options with an {@link LlbChatOptions#getOutputSchema() output
 * schema} send it as llb's {@code response_format}; llb's grammar holds the reply to it, so
 * {@code ChatClient}'s {@code entity(...)} with {@code useProviderStructuredOutput()} (or
 * {@code AdvisorParams.ENABLE_NATIVE_STRUCTURED_OUTPUT}) gets JSON that parses, with no format
 * instructions in the prompt.
 *
 * <p><b>Memory</b>: one model runs on one pool for its life, so a conversation's next turn
 * (Spring AI's {@code MessageChatMemoryAdvisor} resending the history) reuses the KV cache of the
 * turn before: only the new messages are evaluated ({@code cacheReadInputTokens} in the usage).
 *
 * <p><b>Errors</b>: llb's errors are Spring AI's {@code TransientAiException} ({@code busy},
 * {@code queue_full}) or {@code NonTransientAiException} (the others) whose cause is the
 * {@link LlbException} with llb's code ({@code docs/errors.md}).
 *
 * <p><b>Retries and timeouts</b>: with a {@link Builder#retryTemplate RetryTemplate} (Spring
 * Framework's, as Spring AI's OpenAI and Ollama models take it; the Boot auto-configuration passes
 * the application's), a call or stream that llb refuses as transient ({@code queue_full},
 * {@code busy}: before any work, so before any chunk) is tried again as the template's policy says;
 * other errors are not. A {@link Builder#timeout timeout} bounds each call, retries included: when
 * it passes, the request is cancelled in the pool (its place freed at once) and the call fails with
 * a {@code NonTransientAiException} (a stream with it as its error), which no template retries.
 */
public final class LlbChatModel implements ChatModel, AutoCloseable {
    private final ChatPool pool;
    private final boolean ownsPool;
    private final LlbChatOptions defaults;
    private final ToolCallingManager toolCallingManager;
    private final Scheduler streamScheduler;
    private final String modelName;
    private final int maxToolRounds;
    private final ObservationRegistry observationRegistry;
    private final ChatModelObservationConvention observationConvention;
    private final RetryTemplate retryTemplate;
    private final Duration timeout;

    /** The provider name in observations ({@code gen_ai.provider.name}). */
    public static final String PROVIDER = "llb";
    private static final ChatModelObservationConvention DEFAULT_OBSERVATION_CONVENTION =
            new DefaultChatModelObservationConvention();

    private LlbChatModel(Builder b, ChatPool pool, boolean ownsPool) {
        this.pool = pool;
        this.ownsPool = ownsPool;
        this.defaults = b.defaultOptions != null ? b.defaultOptions : LlbChatOptions.builder().build();
        this.toolCallingManager = b.toolCallingManager != null ? b.toolCallingManager : ToolCallingManager.builder().build();
        this.streamScheduler = b.streamScheduler != null ? b.streamScheduler : Schedulers.boundedElastic();
        this.modelName = b.modelName;
        this.maxToolRounds = b.maxToolRounds;
        this.observationRegistry = b.observationRegistry != null ? b.observationRegistry : ObservationRegistry.NOOP;
        this.observationConvention = b.observationConvention;
        this.retryTemplate = b.retryTemplate;
        this.timeout = b.timeout;
    }

    /**
     * A new builder.
     *
     * @return the builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * The default options; {@code ChatClient} starts every request from them.
     *
     * @return the options the builder was given (or empty ones)
     */
    @Override
    public LlbChatOptions getOptions() {
        return defaults;
    }

    /**
     * The pool this model runs on ({@link ChatPool#stats()} shows its running and queued requests).
     *
     * @return the pool
     */
    public ChatPool pool() {
        return pool;
    }

    @Override
    public ChatResponse call(Prompt prompt) {
        LlbChatOptions options = options(prompt);
        List<Message> messages = new ArrayList<>(prompt.getInstructions());
        for (int round = 0; ; round++) {
            String json = Mapping.request(messages, options, toolDefinitions(options));
            ChatModelObservationContext context = ChatModelObservationContext.builder()
                    .prompt(new Prompt(messages, observed(options))).provider(PROVIDER).build();
            ChatResponse response = observation(context).observe(() -> {
                ChatResponse r = Mapping.response(infer(json), modelName);
                context.setResponse(r);
                return r;
            });
            if (!Boolean.TRUE.equals(options.getInternalToolExecutionEnabled()) || !response.hasToolCalls()) {
                return response;
            }
            checkRounds(round);
            ToolExecutionResult result = toolCallingManager.executeToolCalls(new Prompt(messages, options), response);
            if (result.returnDirect()) {
                return ChatResponse.builder().from(response).generations(ToolExecutionResult.buildGenerations(result)).build();
            }
            messages = new ArrayList<>(result.conversationHistory());
        }
    }

    @Override
    public Flux<ChatResponse> stream(Prompt prompt) {
        return Flux.defer(() -> {
            LlbChatOptions options = options(prompt);
            return stream(new ArrayList<>(prompt.getInstructions()), options, 0);
        });
    }

    private Flux<ChatResponse> stream(List<Message> messages, LlbChatOptions options, int round) {
        String json = Mapping.request(messages, options, toolDefinitions(options));
        Flux<ChatResponse> once = Flux.deferContextual(view -> {
            ChatModelObservationContext context = ChatModelObservationContext.builder()
                    .prompt(new Prompt(messages, observed(options))).provider(PROVIDER).streaming(true).build();
            Observation observation = started(context,
                    view.getOrDefault(ObservationThreadLocalAccessor.KEY, observationRegistry.getCurrentObservation()));
            CancellationToken cancel = new CancellationToken();
            Deadline deadline = Deadline.after(timeout, cancel); // from the subscription on
            return Flux.<ChatResponse>create(sink -> generate(json, sink, context, cancel, deadline))
                    .subscribeOn(streamScheduler, false) // requests must not queue behind the held thread
                    .doOnError(observation::error)
                    .doFinally(signal -> {
                        deadline.close();
                        observation.stop();
                    })
                    .contextWrite(c -> c.put(ObservationThreadLocalAccessor.KEY, observation));
        });
        if (!Boolean.TRUE.equals(options.getInternalToolExecutionEnabled())) {
            return once;
        }
        List<ChatResponse> seen = new ArrayList<>();
        return once.doOnNext(seen::add).concatWith(Flux.defer(() -> {
            List<AssistantMessage.ToolCall> calls = new ArrayList<>();
            StringBuilder text = new StringBuilder();
            for (ChatResponse r : seen) {
                calls.addAll(r.getResult().getOutput().getToolCalls());
                text.append(r.getResult().getOutput().getText());
            }
            if (calls.isEmpty()) {
                return Flux.empty();
            }
            checkRounds(round);
            ChatResponse whole = new ChatResponse(List.of(new Generation(
                    AssistantMessage.builder().content(text.toString()).toolCalls(calls).build())));
            ToolExecutionResult result = toolCallingManager.executeToolCalls(new Prompt(messages, options), whole);
            if (result.returnDirect()) {
                return Flux.just(ChatResponse.builder().from(whole).generations(ToolExecutionResult.buildGenerations(result)).build());
            }
            return stream(new ArrayList<>(result.conversationHistory()), options, round + 1);
        }));
    }

    /**
     * Runs one streamed request on this thread, handing its deltas to {@code sink}; the whole
     * completion goes to the observation's context.
     */
    private void generate(String json, FluxSink<ChatResponse> sink, ChatModelObservationContext context,
            CancellationToken cancel, Deadline deadline) {
        sink.onDispose(cancel::cancel);
        Demand demand = new Demand(sink, () -> cancel.isCancelled() || pool.isClosed());
        Mapping.Chunks chunks = new Mapping.Chunks(modelName, response -> {
            demand.await();
            sink.next(response);
        });
        try {
            String completion = invoke((p, token) -> p.stream(json, chunks::accept, token), cancel, deadline);
            demand.release();
            context.setResponse(Mapping.response(completion, modelName));
            if (!cancel.isCancelled()) {
                chunks.finish(completion);
            }
            sink.complete();
        } catch (RuntimeException | Error e) {
            sink.error(e);
        }
    }

    /** One model call's {@code gen_ai.client.operation} observation (not started). */
    private Observation observation(ChatModelObservationContext context) {
        return ChatModelObservationDocumentation.CHAT_MODEL_OPERATION.observation(observationConvention,
                DEFAULT_OBSERVATION_CONVENTION, () -> context, observationRegistry);
    }

    /**
     * A stream's observation, started as Spring AI's own streams start theirs: a child of
     * {@code parent} (the caller's, from the subscriber's context or the subscribing thread), with
     * the parent's scope open while it starts, so a tracing handler makes its span a child of the
     * parent's span rather than of whatever scope the thread has open.
     */
    private Observation started(ChatModelObservationContext context, Observation parent) {
        Observation observation = observation(context);
        observation.parentObservation(parent);
        Observation.Scope scope = parent != null ? parent.openScope() : Observation.Scope.NOOP;
        try {
            observation.start();
        } finally {
            scope.close();
        }
        return observation;
    }

    /** The options an observation reports: the request's, naming this model when they name none. */
    private ChatOptions observed(LlbChatOptions options) {
        return options.getModel() != null ? options : options.mutate().model(modelName).build();
    }

    private void checkRounds(int round) {
        if (round + 1 >= maxToolRounds) {
            throw new NonTransientAiException("the model still called tools after " + maxToolRounds
                    + " rounds (LlbChatModel.Builder.maxToolRounds)");
        }
    }

    /** One {@code infer} of {@code json}, within the timeout from now. */
    private String infer(String json) {
        CancellationToken cancel = new CancellationToken();
        try (Deadline deadline = Deadline.after(timeout, cancel)) {
            return invoke((p, token) -> p.infer(json, token), cancel, deadline);
        }
    }

    /**
     * Runs {@code call} on the pool with {@code cancel}, tried again through the retry template
     * while llb refuses it as transient; {@code deadline} cancels it when the timeout passes.
     */
    private String invoke(BiFunction<ChatPool, CancellationToken, String> call, CancellationToken cancel, Deadline deadline) {
        if (retryTemplate == null) {
            return attempt(call, cancel, deadline);
        }
        return RetryUtils.execute(retryTemplate, () -> attempt(call, cancel, deadline));
    }

    /** One try of {@link #invoke}: llb's errors as Spring AI's, a passed deadline as a non-transient one. */
    private String attempt(BiFunction<ChatPool, CancellationToken, String> call, CancellationToken cancel, Deadline deadline) {
        try {
            String completion = deadline.expired() ? null : call.apply(pool, cancel);
            if (deadline.expired()) {
                throw new NonTransientAiException("llb: the call did not end within its timeout (" + timeout
                        + "); it was cancelled");
            }
            return completion;
        } catch (LlbException e) {
            throw Mapping.error(e);
        }
    }

    private List<ToolDefinition> toolDefinitions(LlbChatOptions options) {
        return toolCallingManager.resolveToolDefinitions(options);
    }

    /**
     * The request's options: the prompt's over the model's defaults. The prompt's tool callbacks
     * replace the defaults' when it has any (as {@link ToolCallingChatOptions#mergeToolCallbacks}).
     */
    LlbChatOptions options(Prompt prompt) {
        ChatOptions given = prompt.getOptions();
        if (given == null) {
            return defaults;
        }
        LlbChatOptions runtime = LlbChatOptions.from(given);
        LlbChatOptions.Builder b = defaults.mutate().toolCallbacks((List<ToolCallback>) null).toolContext(null);
        b.combineWith(runtime.mutate().toolCallbacks((List<ToolCallback>) null).toolContext(null));
        List<ToolCallback> callbacks = ToolCallingChatOptions.mergeToolCallbacks(
                runtime.getToolCallbacks(), defaults.getToolCallbacks());
        ToolCallingChatOptions.validateToolCallbacks(callbacks);
        return b.toolCallbacks(callbacks).toolContext(ToolCallingChatOptions.mergeToolContext(runtime.getToolContext(),
                defaults.getToolContext())).build();
    }

    /** Closes the pool if this model opened it; a pool given to {@link Builder#pool} stays open. */
    @Override
    public void close() {
        if (ownsPool) {
            pool.close();
        }
    }

    /**
     * Builds an {@link LlbChatModel}: {@link #modelPath}, {@link #config} or {@link #pool}, the
     * rest optional.
     */
    public static final class Builder {
        private Path modelPath;
        private ChatConfig config;
        private ChatPool pool;
        private Integer contextSize;
        private Integer threads;
        private Integer gpuLayers;
        private int parallel = 4;
        private Integer maxQueue;
        private LlbChatOptions defaultOptions;
        private ToolCallingManager toolCallingManager;
        private Scheduler streamScheduler;
        private String modelName;
        private int maxToolRounds = 16;
        private ObservationRegistry observationRegistry;
        private ChatModelObservationConvention observationConvention;
        private RetryTemplate retryTemplate;
        private Duration timeout;

        private Builder() {}

        /**
         * Retries calls and streams that llb refuses as transient ({@code queue_full},
         * {@code busy}), as the template's policy says; Spring AI's
         * {@code RetryUtils.DEFAULT_RETRY_TEMPLATE} or Boot's {@code spring.ai.retry.*} one retry
         * {@code TransientAiException}s, which those refusals are.
         *
         * @param template default: none (a refused call fails at once)
         * @return this builder
         */
        public Builder retryTemplate(RetryTemplate template) {
            this.retryTemplate = template;
            return this;
        }

        /**
         * The time one call or stream may take, waiting for a turn and retries included; then its
         * request is cancelled in the pool and it fails with a {@code NonTransientAiException}. A
         * running request sees the cancellation at its next token; one still waiting in the
         * pool's queue within ~50 ms (llb's {@code queued} progress events), and leaves the queue
         * at once.
         *
         * @param timeout default: none
         * @return this builder
         */
        public Builder timeout(Duration timeout) {
            this.timeout = timeout;
            return this;
        }

        /**
         * The GGUF model to open (with llb's defaults, changed by {@link #contextSize},
         * {@link #threads}, {@link #gpuLayers}).
         *
         * @param modelPath the GGUF file
         * @return this builder
         */
        public Builder modelPath(Path modelPath) {
            this.modelPath = modelPath;
            return this;
        }

        /**
         * The whole engine config (every llb setting), instead of {@link #modelPath}.
         *
         * @param config the model and engine settings
         * @return this builder
         */
        public Builder config(ChatConfig config) {
            this.config = config;
            return this;
        }

        /**
         * An open pool to run on, instead of opening one; {@link LlbChatModel#close()} leaves it open.
         *
         * @param pool the pool
         * @return this builder
         */
        public Builder pool(ChatPool pool) {
            this.pool = pool;
            return this;
        }

        /**
         * The KV cache size all requests share ({@code n_ctx}; llb's default: 4096 per parallel request).
         *
         * @param tokens the context size
         * @return this builder
         */
        public Builder contextSize(Integer tokens) {
            this.contextSize = tokens;
            return this;
        }

        /**
         * CPU threads for decoding ({@code n_threads}; default: every core).
         *
         * @param threads the thread count
         * @return this builder
         */
        public Builder threads(Integer threads) {
            this.threads = threads;
            return this;
        }

        /**
         * Layers offloaded to GPUs ({@code n_gpu_layers}; -1: all; default: all when there is a GPU).
         *
         * @param layers the layer count
         * @return this builder
         */
        public Builder gpuLayers(Integer layers) {
            this.gpuLayers = layers;
            return this;
        }

        /**
         * Requests that decode at once ({@code n_parallel}, default 4).
         *
         * @param parallel 1 to 128
         * @return this builder
         */
        public Builder parallel(int parallel) {
            this.parallel = parallel;
            return this;
        }

        /**
         * Requests that may wait for a turn ({@code max_queue}; llb's default: 16 × parallel); past
         * that a call fails at once with a {@code TransientAiException} (llb's {@code queue_full}).
         *
         * @param maxQueue the queue length
         * @return this builder
         */
        public Builder maxQueue(Integer maxQueue) {
            this.maxQueue = maxQueue;
            return this;
        }

        /**
         * The default request options.
         *
         * @param options the options every request starts from
         * @return this builder
         */
        public Builder defaultOptions(LlbChatOptions options) {
            this.defaultOptions = options;
            return this;
        }

        /**
         * Resolves tool callbacks to definitions (and runs them when the model runs the tool loop).
         *
         * @param manager default: {@code ToolCallingManager.builder().build()}
         * @return this builder
         */
        public Builder toolCallingManager(ToolCallingManager manager) {
            this.toolCallingManager = manager;
            return this;
        }

        /**
         * Where streamed requests run (they block a thread while llb generates).
         *
         * @param scheduler default: {@code Schedulers.boundedElastic()}
         * @return this builder
         */
        public Builder streamScheduler(Scheduler scheduler) {
            this.streamScheduler = scheduler;
            return this;
        }

        /**
         * The model name in the response metadata.
         *
         * @param name default: the GGUF file's name
         * @return this builder
         */
        public Builder modelName(String name) {
            this.modelName = name;
            return this;
        }

        /**
         * Where the model's {@code gen_ai.client.operation} observations go (metrics, traces).
         *
         * @param registry default: {@link ObservationRegistry#NOOP} (none recorded)
         * @return this builder
         */
        public Builder observationRegistry(ObservationRegistry registry) {
            this.observationRegistry = registry;
            return this;
        }

        /**
         * The names and key values of the observations.
         *
         * @param convention default: Spring AI's {@link DefaultChatModelObservationConvention}
         * @return this builder
         */
        public Builder observationConvention(ChatModelObservationConvention convention) {
            this.observationConvention = convention;
            return this;
        }

        /**
         * How many model calls one request may make when the model runs the tool loop itself.
         *
         * @param rounds default 16
         * @return this builder
         */
        public Builder maxToolRounds(int rounds) {
            this.maxToolRounds = rounds;
            return this;
        }

        /**
         * Opens the pool (unless one was given).
         *
         * @return the model
         * @throws NonTransientAiException when llb cannot open the model; its cause is the
         *     {@link LlbException} ({@link dev.llb.ToolsUnsupportedException} when llb refuses a
         *     model whose chat template cannot do tool calls), its message llb's
         */
        public LlbChatModel build() {
            if (pool != null) {
                if (modelName == null) {
                    modelName = "llb";
                }
                return new LlbChatModel(this, pool, false);
            }
            ChatConfig c = config;
            if (c == null) {
                Objects.requireNonNull(modelPath, "modelPath (or config, or pool) is required");
                c = ChatConfig.of(modelPath);
            }
            if (contextSize != null) {
                c = c.withContextSize(contextSize);
            }
            if (threads != null) {
                c = c.withThreads(threads);
            }
            if (gpuLayers != null) {
                c = c.withGpuLayers(gpuLayers);
            }
            if (modelName == null) {
                modelName = c.modelPath().getFileName().toString();
            }
            ChatPool opened;
            try {
                opened = ChatPool.open(c, parallel, maxQueue);
            } catch (LlbException e) {
                throw Mapping.error(e);
            }
            return new LlbChatModel(this, opened, true);
        }
    }
}
