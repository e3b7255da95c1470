package dev.llb.langchain4j;

import dev.langchain4j.model.ModelProvider;
import dev.langchain4j.model.chat.Capability;
import dev.langchain4j.model.chat.ChatModel;
import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.DefaultChatRequestParameters;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.llb.ChatConfig;
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
        this.defaults = b.defaultRequestParameters != null ? b.defaultRequestParameters : DefaultChatRequestParameters.EMPTY;
        this.listeners = List.copyOf(b.listeners);
        this.extras = new Mapping.Extras(b.seed, b.parallelToolCalls, b.strictTools);
        this.engines = Engines.of(b.config, b.engine, b.modelName);
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
        String completion;
        engines.lock.lock();
        try {
            completion = engines.engine().infer(json);
        } catch (LlbException e) {
            throw Mapping.error(e);
        } finally {
            engines.lock.unlock();
        }
        return Mapping.response(completion, engines.modelName);
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

    /** Closes the engine if this model opened it ({@link Builder#config}); an engine given to {@link Builder#engine} stays open. */
    @Override
    public void close() {
        engines.close();
    }

    /** Builds an {@link LlbChatModel}: {@link #config} or {@link #engine}, the rest optional. */
    public static final class Builder {
        private ChatConfig config;
        private ChatEngine engine;
        private String modelName;
        private ChatRequestParameters defaultRequestParameters;
        private List<ChatModelListener> listeners = List.of();
        private Long seed;
        private Boolean parallelToolCalls;
        private boolean strictTools;

        private Builder() {}

        /**
         * The model and engine settings; the model opens the engine and closes it in {@link LlbChatModel#close()}.
         *
         * @param config e.g. {@code ChatConfig.of(path).withContextSize(8192)}
         * @return this builder
         */
        public Builder config(ChatConfig config) {
            this.config = config;
            return this;
        }

        /**
         * An engine the caller opened and will close.
         *
         * @param engine the engine
         * @return this builder
         */
        public Builder engine(ChatEngine engine) {
            this.engine = engine;
            return this;
        }

        /**
         * The name reported in responses.
         *
         * @param modelName default: the GGUF's file name
         * @return this builder
         */
        public Builder modelName(String modelName) {
            this.modelName = modelName;
            return this;
        }

        /**
         * Parameters of every request (a request's own parameters win).
         *
         * @param parameters temperature, max output tokens, tool choice, ...
         * @return this builder
         */
        public Builder defaultRequestParameters(ChatRequestParameters parameters) {
            this.defaultRequestParameters = parameters;
            return this;
        }

        /**
         * LangChain4j's model listeners.
         *
         * @param listeners called around each request
         * @return this builder
         */
        public Builder listeners(List<ChatModelListener> listeners) {
            this.listeners = listeners == null ? List.of() : listeners;
            return this;
        }

        /**
         * The sampling seed of every request ({@code seed}).
         *
         * @param seed the seed
         * @return this builder
         */
        public Builder seed(Long seed) {
            this.seed = seed;
            return this;
        }

        /**
         * Whether the model may call several tools at once ({@code parallel_tool_calls}; llb's default: yes, where the template can).
         *
         * @param parallelToolCalls the switch
         * @return this builder
         */
        public Builder parallelToolCalls(Boolean parallelToolCalls) {
            this.parallelToolCalls = parallelToolCalls;
            return this;
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
        public Builder strictTools(boolean strictTools) {
            this.strictTools = strictTools;
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
