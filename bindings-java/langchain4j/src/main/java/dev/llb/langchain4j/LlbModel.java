package dev.llb.langchain4j;

import dev.langchain4j.model.ModelProvider;
import dev.langchain4j.model.chat.Capability;
import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.llb.ChatEngine;
import dev.llb.LlbException;
import java.util.List;
import java.util.Set;

/**
 * What {@link LlbChatModel} and {@link LlbStreamingChatModel} share: a LangChain4j model backed by
 * an llb {@link dev.llb.ChatPool} in this process, with no server and no HTTP. Tool specifications
 * become OpenAI tools; llb renders them with the model's own chat template and constrains tool
 * calls to their schemas.
 *
 * <p>A model built from a {@link LlbModelBuilder#config config} opens a pool of
 * {@link LlbModelBuilder#parallel parallel} requests (default 4): calls from many threads run at
 * once, up to {@link LlbModelBuilder#maxQueue maxQueue} more wait, and past that a call is refused
 * with {@code queue_full}, which {@link LlbModelBuilder#maxRetries maxRetries} retries. A
 * conversation's next turn reuses its KV cache ({@link LlbTokenUsage#cachedTokens()}). A model
 * built on a {@link ChatEngine} ({@link LlbModelBuilder#engine}) runs one call at a time (a
 * second thread waits). Per-request llb options ride in {@link LlbChatRequestParameters}. Errors are LangChain4j exceptions
 * whose cause is the {@link LlbException} with llb's code: {@code invalid_argument},
 * {@code invalid_json} and {@code context_overflow} are {@code InvalidRequestException}s,
 * {@code tools_unsupported} an {@code UnsupportedFeatureException}, {@code file_not_found} a
 * {@code ModelNotFoundException}, {@code busy} and {@code queue_full} {@code RetriableException}s, {@code internal} an
 * {@code InternalServerException}, others {@code NonRetriableException}s.
 */
public abstract sealed class LlbModel implements AutoCloseable permits LlbChatModel, LlbStreamingChatModel {
    /** The pool or engine, whose calls map llb's errors. */
    final Engines engines;
    /** How requests are written and replies read. */
    final Mapping.Style style;
    /** Retries and timeout. */
    final Attempts attempts;
    private final LlbChatRequestParameters defaults;
    private final List<ChatModelListener> listeners;

    /** Takes the builder's settings, then opens the engine (or wraps the one given). */
    LlbModel(LlbModelBuilder<?, ?> b) {
        this.defaults = b.defaults();
        this.listeners = b.listenerList();
        this.style = b.style();
        this.attempts = b.attempts();
        this.engines = b.engines();
    }

    /**
     * The builder's {@link LlbModelBuilder#defaultRequestParameters default request parameters}.
     *
     * @return the parameters every request starts from, the builder's shortcuts included (a
     *     request's own parameters override them field by field)
     */
    public LlbChatRequestParameters defaultRequestParameters() {
        return defaults;
    }

    /**
     * The builder's {@link LlbModelBuilder#listeners listeners}.
     *
     * @return the listeners called around each request
     */
    public List<ChatModelListener> listeners() {
        return listeners;
    }

    /**
     * {@link ModelProvider#OTHER}: LangChain4j has no name for llb.
     *
     * @return {@link ModelProvider#OTHER}
     */
    public ModelProvider provider() {
        return ModelProvider.OTHER;
    }

    /**
     * JSON-schema response formats: llb constrains the reply to the schema with a grammar.
     *
     * @return {@link Capability#RESPONSE_FORMAT_JSON_SCHEMA}
     */
    public Set<Capability> supportedCapabilities() {
        return Set.of(Capability.RESPONSE_FORMAT_JSON_SCHEMA);
    }

    /**
     * Closes the engine if this model opened it ({@link LlbModelBuilder#config Builder.config});
     * an engine given to {@link LlbModelBuilder#engine Builder.engine} stays open.
     */
    @Override
    public void close() {
        engines.close();
    }
}
