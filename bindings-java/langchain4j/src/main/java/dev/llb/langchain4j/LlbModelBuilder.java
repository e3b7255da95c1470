package dev.llb.langchain4j;

import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.ResponseFormat;
import dev.langchain4j.model.chat.request.ToolChoice;
import dev.llb.ChatConfig;
import dev.llb.ChatEngine;
import dev.llb.ChatPool;
import java.time.Duration;
import java.util.List;

/**
 * The settings that {@link LlbChatModel.Builder} and {@link LlbStreamingChatModel.Builder} share,
 * and {@link #build}: {@link #config}, {@link #engine} or {@link #pool}, the rest optional. Each setter returns the builder it was
 * called on, so calls chain in any order with the builder's own settings.
 *
 * <p>As LangChain4j's own model builders: request parameters as shortcuts ({@link #temperature},
 * {@link #maxTokens}, {@link #seed}, ...), which win over the same fields of
 * {@link #defaultRequestParameters}; {@link #maxRetries} and {@link #timeout};
 * {@link #returnThinking}.
 *
 * @param <B> the concrete builder
 * @param <M> the model it builds
 */
public abstract class LlbModelBuilder<B extends LlbModelBuilder<B, M>, M extends LlbModel> {
    private ChatConfig config;
    private ChatEngine engine;
    private ChatPool pool;
    private String modelName;
    private ChatRequestParameters defaultRequestParameters;
    /** The shortcuts' fields; only those set override {@link #defaultRequestParameters}. */
    private final LlbChatRequestParameters.Builder shortcuts = LlbChatRequestParameters.builder();
    private List<ChatModelListener> listeners = List.of();
    private boolean strictTools;
    private boolean returnThinking;
    private int maxRetries = 2;
    private Duration timeout;
    private int parallel = 4;
    private Integer maxQueue;

    /** Only the builders of this package extend it. */
    LlbModelBuilder() {}

    /** This builder as its concrete type. */
    abstract B self();

    /** The model, from this builder's settings: the concrete builder's constructor call. */
    abstract M create();

    /**
     * Opens the engine (unless one was given).
     *
     * @return the model
     * @throws dev.langchain4j.exception.UnsupportedFeatureException when llb refuses the model because its chat template cannot do tool calls
     * @throws dev.langchain4j.exception.ModelNotFoundException when the file does not exist
     * @throws dev.langchain4j.exception.LangChain4jException for other llb errors
     */
    public M build() {
        return create();
    }

    /**
     * The model and engine settings; the model opens a pool of {@link #parallel} requests on them
     * and closes it in its {@code close()} ({@link LlbChatModel#close()},
     * {@link LlbStreamingChatModel#close()}). The config's context size is the KV budget the
     * pool's requests share. The prompt cache and speculative decoding are set here
     * ({@link ChatConfig#withPromptCache}, {@link ChatConfig#withSpeculative}).
     *
     * @param config e.g. {@code ChatConfig.of(path).withContextSize(8192)
     *     .withSpeculative(Speculative.ngram("ngram-mod"))}
     * @return this builder
     */
    public B config(ChatConfig config) {
        this.config = config;
        return self();
    }

    /**
     * Requests that decode at once on the pool the model opens from {@link #config}
     * ({@code n_parallel}); more wait for a turn, up to {@link #maxQueue}.
     *
     * @param parallel 1 to 128, default 4
     * @return this builder
     */
    public B parallel(int parallel) {
        this.parallel = parallel;
        return self();
    }

    /**
     * Requests that may wait for a turn on the pool the model opens from {@link #config}
     * ({@code max_queue}); past them a call is refused with llb's {@code queue_full}, a
     * {@code RetriableException} that {@link #maxRetries} retries.
     *
     * @param maxQueue default: llb's, 16 × parallel
     * @return this builder
     */
    public B maxQueue(Integer maxQueue) {
        this.maxQueue = maxQueue;
        return self();
    }

    /**
     * How many times a call llb refuses as transient ({@code queue_full}, {@code busy}) is tried
     * again, with LangChain4j's backoff (500 ms, then × 1.5); nothing else is retried.
     *
     * @param maxRetries default 2, as LangChain4j's OpenAI model
     * @return this builder
     */
    public B maxRetries(Integer maxRetries) {
        this.maxRetries = maxRetries == null ? 2 : maxRetries;
        return self();
    }

    /**
     * The time one call may take, waiting for a turn and retries included; then its request is
     * cancelled in the pool (its place freed at once) and the call fails with LangChain4j's
     * {@code TimeoutException} (a stream: {@code onError}), which is not retried. A running
     * request sees the cancellation at its next token; one still waiting in the pool's queue
     * within ~50 ms (llb's {@code queued} progress events), and leaves the queue at once.
     *
     * @param timeout default: none
     * @return this builder
     */
    public B timeout(Duration timeout) {
        this.timeout = timeout;
        return self();
    }

    /**
     * Whether the model's reasoning is returned: in {@code AiMessage.thinking()} and, streamed,
     * to {@code onPartialThinking}. As LangChain4j's OpenAI and Ollama models: not by default.
     *
     * @param returnThinking default false
     * @return this builder
     */
    public B returnThinking(Boolean returnThinking) {
        this.returnThinking = Boolean.TRUE.equals(returnThinking);
        return self();
    }

    /**
     * The default sampling temperature (a shortcut for {@link #defaultRequestParameters}).
     *
     * @param temperature the temperature
     * @return this builder
     */
    public B temperature(Double temperature) {
        shortcuts.temperature(temperature);
        return self();
    }

    /**
     * The default nucleus sampling ({@code top_p}).
     *
     * @param topP the probability mass
     * @return this builder
     */
    public B topP(Double topP) {
        shortcuts.topP(topP);
        return self();
    }

    /**
     * The default top-k sampling ({@code top_k}).
     *
     * @param topK the candidates
     * @return this builder
     */
    public B topK(Integer topK) {
        shortcuts.topK(topK);
        return self();
    }

    /**
     * The default frequency penalty.
     *
     * @param penalty the penalty
     * @return this builder
     */
    public B frequencyPenalty(Double penalty) {
        shortcuts.frequencyPenalty(penalty);
        return self();
    }

    /**
     * The default presence penalty.
     *
     * @param penalty the penalty
     * @return this builder
     */
    public B presencePenalty(Double penalty) {
        shortcuts.presencePenalty(penalty);
        return self();
    }

    /**
     * The default most tokens to generate ({@code max_tokens}; LangChain4j's
     * {@code maxOutputTokens}).
     *
     * @param maxTokens the tokens
     * @return this builder
     */
    public B maxTokens(Integer maxTokens) {
        shortcuts.maxOutputTokens(maxTokens);
        return self();
    }

    /**
     * The default stop sequences ({@code stop}).
     *
     * @param stop the sequences
     * @return this builder
     */
    public B stop(List<String> stop) {
        shortcuts.stopSequences(stop);
        return self();
    }

    /**
     * The default tool choice ({@code tool_choice}).
     *
     * @param toolChoice AUTO, REQUIRED or NONE
     * @return this builder
     */
    public B toolChoice(ToolChoice toolChoice) {
        shortcuts.toolChoice(toolChoice);
        return self();
    }

    /**
     * The default response format ({@code response_format}: a JSON schema llb's grammar enforces).
     *
     * @param format the format
     * @return this builder
     */
    public B responseFormat(ResponseFormat format) {
        shortcuts.responseFormat(format);
        return self();
    }

    /**
     * An engine the caller opened and will close.
     *
     * @param engine the engine
     * @return this builder
     */
    public B engine(ChatEngine engine) {
        this.engine = engine;
        return self();
    }

    /**
     * A pool the caller opened and will close, instead of the one {@link #config} opens: many requests (from many threads, each with its own
     * conversation) run on it at once, up to its {@code parallel}; up to its {@code maxQueue} more
     * wait, and past that a call fails at once with a {@code RetriableException} (llb's
     * {@code queue_full}). Several models may share one pool.
     *
     * @param pool the pool
     * @return this builder
     */
    public B pool(ChatPool pool) {
        this.pool = pool;
        return self();
    }

    /**
     * The name reported in responses.
     *
     * @param modelName default: the GGUF's file name
     * @return this builder
     */
    public B modelName(String modelName) {
        this.modelName = modelName;
        return self();
    }

    /**
     * Parameters of every request (a request's own parameters win).
     *
     * @param parameters temperature, max output tokens, tool choice, ...
     * @return this builder
     */
    public B defaultRequestParameters(ChatRequestParameters parameters) {
        this.defaultRequestParameters = parameters;
        return self();
    }

    /**
     * LangChain4j's model listeners.
     *
     * @param listeners called around each request
     * @return this builder
     */
    public B listeners(List<ChatModelListener> listeners) {
        this.listeners = listeners == null ? List.of() : listeners;
        return self();
    }

    /**
     * The sampling seed of every request ({@code seed}).
     *
     * @param seed the seed
     * @return this builder
     */
    public B seed(Long seed) {
        shortcuts.seed(seed);
        return self();
    }

    /**
     * Whether the model may call several tools at once ({@code parallel_tool_calls}; llb's default: yes, where the template can).
     *
     * @param parallelToolCalls the switch
     * @return this builder
     */
    public B parallelToolCalls(Boolean parallelToolCalls) {
        shortcuts.parallelToolCalls(parallelToolCalls);
        return self();
    }

    /**
     * Sends tools in OpenAI's strict mode: {@code "strict":true}, every object's properties
     * required and no others allowed ({@code "additionalProperties":false}). llb's grammar then
     * holds the model to exactly the tool's parameters; without it a schema that does not say
     * {@code additionalProperties} lets the model add properties of its own.
     *
     * @param strictTools default false, as LangChain4j's OpenAI module
     * @return this builder
     */
    public B strictTools(boolean strictTools) {
        this.strictTools = strictTools;
        return self();
    }

    /**
     * The reasoning budget of every request ({@code reasoning_budget}): the tokens a reasoning
     * model may think before llb ends the thinking and the model answers.
     *
     * @param tokens -1 unlimited, 0 no thinking, a token count; null: the engine's default
     *     ({@link ChatConfig#withReasoningBudget})
     * @return this builder
     */
    public B reasoningBudget(Integer tokens) {
        shortcuts.reasoningBudget(tokens);
        return self();
    }

    /**
     * Speculative decoding on or off for every request ({@code speculative}), whatever the
     * engine's config ({@link ChatConfig#withSpeculative}) says. The completion's
     * {@code timings.draft_n} and {@code timings.draft_accepted_n} say how many tokens were
     * drafted and accepted.
     *
     * @param speculative true or false; null: the engine's config decides
     * @return this builder
     */
    public B speculative(Boolean speculative) {
        shortcuts.speculative(speculative);
        return self();
    }

    /** The default request parameters: {@link #defaultRequestParameters} with the shortcuts set over them. */
    LlbChatRequestParameters defaults() {
        LlbChatRequestParameters.Builder b = LlbChatRequestParameters.builder();
        if (defaultRequestParameters != null) {
            b.overrideWith(defaultRequestParameters);
        }
        return b.overrideWith(shortcuts.build()).build();
    }

    /** An immutable copy of the listeners. */
    List<ChatModelListener> listenerList() {
        return List.copyOf(listeners);
    }

    /** How requests are written and replies read: {@link #strictTools}, {@link #returnThinking}. */
    Mapping.Style style() {
        return new Mapping.Style(strictTools, returnThinking);
    }

    /** {@link #maxRetries} and {@link #timeout}. */
    Attempts attempts() {
        return new Attempts(maxRetries, timeout);
    }

    /** Opens the pool from {@link #config}, or wraps the {@link #engine} or {@link #pool} given: a model's last step. */
    Engines engines() {
        return Engines.of(config, engine, pool, modelName, parallel, maxQueue);
    }
}
