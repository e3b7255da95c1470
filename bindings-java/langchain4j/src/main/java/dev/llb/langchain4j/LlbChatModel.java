package dev.llb.langchain4j;

import dev.langchain4j.model.ModelProvider;
import dev.langchain4j.model.chat.Capability;
import dev.langchain4j.model.chat.ChatModel;
import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.llb.ChatEngine;
import dev.llb.LlbException;
import java.util.List;
import java.util.Set;

/**
 * A LangChain4j {@link ChatModel} backed by an llb {@link ChatEngine} in this process: no server,
 * no HTTP. Tool specifications become OpenAI tools, llb renders them with the model's own chat
 * template and constrains tool calls to their schemas.
 *
 * <pre>{@code
 * try (LlbChatModel model = LlbChatModel.builder()
 *         .config(ChatConfig.of(Path.of("qwen2.5-7b-instruct-q4_k_m.gguf")).withContextSize(8192))
 *         .build()) {
 *     Assistant assistant = AiServices.builder(Assistant.class).chatModel(model).tools(new WeatherTools()).build();
 *     String answer = assistant.chat("Weather in Paris?");
 * }
 * }</pre>
 *
 * <p>One engine holds one conversation's KV cache: the next turn of the same conversation reuses
 * it ({@link LlbTokenUsage#cachedTokens()}). Calls take turns (a second thread waits); for
 * conversations in parallel use one model per conversation. Errors are LangChain4j exceptions
 * whose cause is the {@link LlbException} with llb's code: {@code invalid_argument},
 * {@code invalid_json} and {@code context_overflow} are {@code InvalidRequestException}s,
 * {@code tools_unsupported} an {@code UnsupportedFeatureException}, {@code file_not_found} a
 * {@code ModelNotFoundException}, {@code busy} a {@code RetriableException}, {@code internal} an
 * {@code InternalServerException}, others {@code NonRetriableException}s.
 */
public final class LlbChatModel implements ChatModel, AutoCloseable {
    private final Engines engines;
    private final ChatRequestParameters defaults;
    private final List<ChatModelListener> listeners;
    private final Mapping.Extras extras;

    private LlbChatModel(Builder b) {
        this.defaults = b.defaults();
        this.listeners = b.listenerList();
        this.extras = b.extras();
        this.engines = b.engines();
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
    public ChatResponse doChat(ChatRequest request) {
        String json = Mapping.request(request, extras);
        return Mapping.response(engines.call(engine -> engine.infer(json)), engines.modelName);
    }

    @Override
    public ChatRequestParameters defaultRequestParameters() {
        return defaults;
    }

    @Override
    public List<ChatModelListener> listeners() {
        return listeners;
    }

    @Override
    public ModelProvider provider() {
        return ModelProvider.OTHER;
    }

    /** JSON-schema response formats: llb constrains the reply to the schema with a grammar. */
    @Override
    public Set<Capability> supportedCapabilities() {
        return Set.of(Capability.RESPONSE_FORMAT_JSON_SCHEMA);
    }

    /** Closes the engine if this model opened it ({@link Builder#config Builder.config}); an engine given to {@link Builder#engine Builder.engine} stays open. */
    @Override
    public void close() {
        engines.close();
    }

    /** Builds an {@link LlbChatModel}: {@link #config config} or {@link #engine engine}, the rest optional. */
    public static final class Builder extends LlbModelBuilder<Builder> {
        private Builder() {}

        @Override
        Builder self() {
            return this;
        }

        /**
         * Opens the engine (unless one was given).
         *
         * @return the model
         * @throws dev.langchain4j.exception.UnsupportedFeatureException when llb refuses the model because its chat template cannot do tool calls
         * @throws dev.langchain4j.exception.ModelNotFoundException when the file does not exist
         * @throws dev.langchain4j.exception.LangChain4jException for other llb errors
         */
        public LlbChatModel build() {
            return new LlbChatModel(this);
        }
    }
}
