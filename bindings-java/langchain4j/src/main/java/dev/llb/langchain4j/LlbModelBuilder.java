package dev.llb.langchain4j;

import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.DefaultChatRequestParameters;
import dev.llb.ChatConfig;
import dev.llb.ChatEngine;
import dev.llb.ChatPool;
import java.util.List;

/**
 * The settings that {@link LlbChatModel.Builder} and {@link LlbStreamingChatModel.Builder} share,
 * and {@link #build}: {@link #config}, {@link #engine} or {@link #pool}, the rest optional. Each setter returns the builder it was
 * called on, so calls chain in any order with the builder's own settings.
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
    private List<ChatModelListener> listeners = List.of();
    private Long seed;
    private Boolean parallelToolCalls;
    private boolean strictTools;
    private Integer reasoningBudget;
    private Boolean speculative;

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
     * The model and engine settings; the model opens the engine and closes it in its
     * {@code close()} ({@link LlbChatModel#close()}, {@link LlbStreamingChatModel#close()}).
     * The engine's prompt cache and speculative decoding are set here
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
     * A pool the caller opened and will close: many requests (from many threads, each with its own
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
        this.seed = seed;
        return self();
    }

    /**
     * Whether the model may call several tools at once ({@code parallel_tool_calls}; llb's default: yes, where the template can).
     *
     * @param parallelToolCalls the switch
     * @return this builder
     */
    public B parallelToolCalls(Boolean parallelToolCalls) {
        this.parallelToolCalls = parallelToolCalls;
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
        this.reasoningBudget = tokens;
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
        this.speculative = speculative;
        return self();
    }

    /** The default request parameters, {@link DefaultChatRequestParameters#EMPTY} when unset. */
    ChatRequestParameters defaults() {
        return defaultRequestParameters != null ? defaultRequestParameters : DefaultChatRequestParameters.EMPTY;
    }

    /** An immutable copy of the listeners. */
    List<ChatModelListener> listenerList() {
        return List.copyOf(listeners);
    }

    /**
     * The request fields from {@link #seed}, {@link #parallelToolCalls}, {@link #strictTools},
     * {@link #reasoningBudget} and {@link #speculative}.
     */
    Mapping.Extras extras() {
        return new Mapping.Extras(seed, parallelToolCalls, strictTools, reasoningBudget, speculative);
    }

    /** Opens the engine from {@link #config}, or wraps the {@link #engine} or {@link #pool} given: a model's last step. */
    Engines engines() {
        return Engines.of(config, engine, pool, modelName);
    }
}
