package dev.llb.langchain4j;

import dev.langchain4j.model.chat.ChatModel;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.llb.CancellationToken;

/**
 * A LangChain4j {@link ChatModel} backed by an llb pool in this process; pool, threads, retries
 * and errors as {@link LlbModel} says.
 *
 * <pre>{@code
 * try (LlbChatModel model = LlbChatModel.builder()
 *         .config(ChatConfig.of(Path.of("qwen2.5-7b-instruct-q4_k_m.gguf")).withContextSize(8192))
 *         .build()) {
 *     Assistant assistant = AiServices.builder(Assistant.class).chatModel(model).tools(new WeatherTools()).build();
 *     String answer = assistant.chat("Weather in Paris?");
 * }
 * }</pre>
 */
public final class LlbChatModel extends LlbModel implements ChatModel {
    private LlbChatModel(Builder b) {
        super(b);
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
        String json = Mapping.request(request, style);
        String completion = attempts.run(engines, (chat, cancel) -> chat.infer(json, cancel), new CancellationToken());
        return Mapping.response(completion, engines.modelName, style.returnThinking());
    }

    /** Builds an {@link LlbChatModel}: {@link #config config} or {@link #engine engine}, the rest optional. */
    public static final class Builder extends LlbModelBuilder<Builder, LlbChatModel> {
        private Builder() {}

        @Override
        Builder self() {
            return this;
        }

        @Override
        LlbChatModel create() {
            return new LlbChatModel(this);
        }
    }
}
