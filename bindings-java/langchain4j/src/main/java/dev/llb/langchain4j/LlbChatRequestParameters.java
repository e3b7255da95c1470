package dev.llb.langchain4j;

import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.DefaultChatRequestParameters;
import java.util.Objects;

/**
 * LangChain4j's request parameters with llb's own: {@code seed}, {@code parallel_tool_calls},
 * {@code reasoning_budget} and {@code speculative}, per request as LangChain4j's
 * {@code OpenAiChatRequestParameters} carries OpenAI's. A request's parameters override the
 * model's {@link LlbModelBuilder#defaultRequestParameters defaults} field by field; plain
 * {@link DefaultChatRequestParameters} in a request keep the defaults' llb fields.
 *
 * <pre>{@code
 * ChatRequest request = ChatRequest.builder().messages(UserMessage.from("Weather in Paris?"))
 *         .parameters(LlbChatRequestParameters.builder().temperature(0.7).seed(42L).reasoningBudget(0).build())
 *         .build();
 * }</pre>
 */
public class LlbChatRequestParameters extends DefaultChatRequestParameters {
    /** No parameter set. */
    public static final LlbChatRequestParameters EMPTY = builder().build();

    private final Long seed;
    private final Boolean parallelToolCalls;
    private final Integer reasoningBudget;
    private final Boolean speculative;

    private LlbChatRequestParameters(Builder builder) {
        super(builder);
        this.seed = builder.seed;
        this.parallelToolCalls = builder.parallelToolCalls;
        this.reasoningBudget = builder.reasoningBudget;
        this.speculative = builder.speculative;
    }

    /**
     * The sampling seed ({@code seed}).
     *
     * @return the seed, or null (llb's: the engine's seed, else random)
     */
    public Long seed() {
        return seed;
    }

    /**
     * Whether one reply may hold several tool calls ({@code parallel_tool_calls}).
     *
     * @return the switch, or null (llb's default: yes, where the template can)
     */
    public Boolean parallelToolCalls() {
        return parallelToolCalls;
    }

    /**
     * The tokens a reasoning model may think ({@code reasoning_budget}).
     *
     * @return -1 unlimited, 0 no thinking, a token count; null: the engine's default
     */
    public Integer reasoningBudget() {
        return reasoningBudget;
    }

    /**
     * Speculative decoding for this request ({@code speculative}).
     *
     * @return true or false; null: the engine's config decides
     */
    public Boolean speculative() {
        return speculative;
    }

    /**
     * These parameters with {@code that}'s set fields over them.
     *
     * @param that the parameters that win (plain LangChain4j ones keep these llb fields)
     * @return the merged parameters
     */
    @Override
    public LlbChatRequestParameters overrideWith(ChatRequestParameters that) {
        return builder().overrideWith(this).overrideWith(that).build();
    }

    /**
     * {@code that}'s fields where these have none (LangChain4j 1.19's counterpart of
     * {@link #overrideWith}).
     *
     * @param that the defaults
     * @return the merged parameters
     */
    public LlbChatRequestParameters defaultedBy(ChatRequestParameters that) {
        return builder().overrideWith(that).overrideWith(this).build();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof LlbChatRequestParameters that && super.equals(o) && Objects.equals(seed, that.seed)
                && Objects.equals(parallelToolCalls, that.parallelToolCalls)
                && Objects.equals(reasoningBudget, that.reasoningBudget) && Objects.equals(speculative, that.speculative);
    }

    @Override
    public int hashCode() {
        return Objects.hash(super.hashCode(), seed, parallelToolCalls, reasoningBudget, speculative);
    }

    @Override
    public String toString() {
        return "LlbChatRequestParameters{" + super.toString() + ", seed=" + seed + ", parallelToolCalls="
                + parallelToolCalls + ", reasoningBudget=" + reasoningBudget + ", speculative=" + speculative + "}";
    }

    /**
     * A new builder.
     *
     * @return the builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /** Builds {@link LlbChatRequestParameters}: LangChain4j's fields and llb's. */
    public static class Builder extends DefaultChatRequestParameters.Builder<Builder> {
        private Long seed;
        private Boolean parallelToolCalls;
        private Integer reasoningBudget;
        private Boolean speculative;

        /** Use {@link LlbChatRequestParameters#builder()}. */
        Builder() {}

        /**
         * Takes every field {@code parameters} sets (llb's too, when they are llb's).
         *
         * @param parameters the parameters to copy over this builder's
         * @return this builder
         */
        @Override
        public Builder overrideWith(ChatRequestParameters parameters) {
            super.overrideWith(parameters);
            if (parameters instanceof LlbChatRequestParameters llb) {
                seed = llb.seed() != null ? llb.seed() : seed;
                parallelToolCalls = llb.parallelToolCalls() != null ? llb.parallelToolCalls() : parallelToolCalls;
                reasoningBudget = llb.reasoningBudget() != null ? llb.reasoningBudget() : reasoningBudget;
                speculative = llb.speculative() != null ? llb.speculative() : speculative;
            }
            return this;
        }

        /**
         * The sampling seed ({@code seed}).
         *
         * @param seed the seed
         * @return this builder
         */
        public Builder seed(Long seed) {
            this.seed = seed;
            return this;
        }

        /**
         * Whether one reply may hold several tool calls ({@code parallel_tool_calls}).
         *
         * @param parallelToolCalls the switch
         * @return this builder
         */
        public Builder parallelToolCalls(Boolean parallelToolCalls) {
            this.parallelToolCalls = parallelToolCalls;
            return this;
        }

        /**
         * The tokens a reasoning model may think before llb ends the thinking ({@code reasoning_budget}).
         *
         * @param tokens -1 unlimited, 0 no thinking, a token count
         * @return this builder
         */
        public Builder reasoningBudget(Integer tokens) {
            this.reasoningBudget = tokens;
            return this;
        }

        /**
         * Speculative decoding on or off for the request ({@code speculative}), whatever the
         * engine's config says.
         *
         * @param speculative true or false
         * @return this builder
         */
        public Builder speculative(Boolean speculative) {
            this.speculative = speculative;
            return this;
        }

        @Override
        public LlbChatRequestParameters build() {
            return new LlbChatRequestParameters(this);
        }
    }
}
