package dev.llb.langchain4j;

import dev.langchain4j.model.output.TokenUsage;
import java.util.Objects;

/**
 * Token usage of an llb completion: LangChain4j's counts plus {@code cachedTokens}, the prompt
 * tokens llb took from the engine's KV cache instead of evaluating them
 * ({@code usage.prompt_tokens_details.cached_tokens}). A conversation's later turns reuse the
 * earlier ones, the model's own replies included.
 */
public class LlbTokenUsage extends TokenUsage {
    private final Integer cachedTokens;

    /**
     * Usage as llb reports it.
     *
     * @param inputTokenCount {@code prompt_tokens}
     * @param outputTokenCount {@code completion_tokens}
     * @param totalTokenCount {@code total_tokens}
     * @param cachedTokens {@code prompt_tokens_details.cached_tokens}
     */
    public LlbTokenUsage(Integer inputTokenCount, Integer outputTokenCount, Integer totalTokenCount, Integer cachedTokens) {
        super(inputTokenCount, outputTokenCount, totalTokenCount);
        this.cachedTokens = cachedTokens;
    }

    /**
     * The prompt tokens reused from the KV cache.
     *
     * @return {@code prompt_tokens_details.cached_tokens}, or null when unknown
     */
    public Integer cachedTokens() {
        return cachedTokens;
    }

    /** Adds the counts; cached tokens add up too when both sides are {@code LlbTokenUsage}. */
    @Override
    public TokenUsage add(TokenUsage that) {
        if (that == null) {
            return this;
        }
        Integer cached = that instanceof LlbTokenUsage llb ? sum(cachedTokens, llb.cachedTokens) : cachedTokens;
        return new LlbTokenUsage(sum(inputTokenCount(), that.inputTokenCount()),
                sum(outputTokenCount(), that.outputTokenCount()), sum(totalTokenCount(), that.totalTokenCount()), cached);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof LlbTokenUsage that && super.equals(that) && Objects.equals(cachedTokens, that.cachedTokens);
    }

    @Override
    public int hashCode() {
        return 31 * super.hashCode() + Objects.hashCode(cachedTokens);
    }

    @Override
    public String toString() {
        return "LlbTokenUsage { inputTokenCount = " + inputTokenCount() + ", outputTokenCount = " + outputTokenCount()
                + ", totalTokenCount = " + totalTokenCount() + ", cachedTokens = " + cachedTokens + " }";
    }
}
