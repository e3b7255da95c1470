package dev.llb.springai;

import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.model.tool.DefaultToolCallingChatOptions;
import org.springframework.ai.model.tool.StructuredOutputChatOptions;
import org.springframework.ai.model.tool.ToolCallingChatOptions;
import org.springframework.ai.tool.ToolCallback;

/**
 * The request options of an {@link LlbChatModel}: Spring AI's portable ones (temperature, top_p,
 * top_k, max tokens, stop sequences, penalties, tool callbacks and tool context) and llb's
 * OpenAI-style fields: {@code seed}, {@code tool_choice}, {@code parallel_tool_calls},
 * {@code reasoning_effort}, {@code reasoning_budget}, {@code speculative}, and any other request
 * field through {@link Builder#extraBody}.
 *
 * <p><b>Structured output.</b> These options are Spring AI's {@link StructuredOutputChatOptions}: an
 * {@link #getOutputSchema() output schema} (set by {@code ChatClient}'s
 * {@code entity(..., spec -> spec.useProviderStructuredOutput())} or
 * {@code AdvisorParams.ENABLE_NATIVE_STRUCTURED_OUTPUT}, or by hand) becomes llb's
 * {@code response_format} {@code json_schema}, which llb's grammar enforces token by token: the
 * reply is JSON that follows the schema, with no format instructions in the prompt. A schema with
 * keywords llb does not enforce is refused with a {@code NonTransientAiException} naming the
 * keyword, never sent unenforced.
 *
 * <p>As for Spring AI's OpenAI model at 2.0: the model sends the tool callbacks' definitions and
 * returns the tool calls it generated; {@code ChatClient}'s tool-calling advisor runs them and
 * calls the model again. {@link Builder#internalToolExecutionEnabled(Boolean)} makes the model run
 * that loop itself, for code that calls the {@code ChatModel} directly.
 *
 * <p>{@code tool_choice} is {@code "auto"}, {@code "none"}, {@code "required"}, a tool's name (that
 * tool is forced), or an OpenAI {@code tool_choice} JSON object. A forced choice holds for every
 * request, as with OpenAI; in a tool loop that never ends. {@link Builder#toolChoiceAfterTools}
 * gives the choice for requests whose last message is a tool result, e.g. {@code "none"} so the
 * model answers with the result (a small local model often has to be forced to call at all).
 *
 * <pre>{@code
 * LlbChatOptions.builder().temperature(0.0).maxTokens(256)
 *         .toolChoice("get_weather").toolChoiceAfterTools("auto").parallelToolCalls(false).build();
 * }</pre>
 */
public class LlbChatOptions extends DefaultToolCallingChatOptions implements StructuredOutputChatOptions {
    private final Long seed;
    private final String toolChoice;
    private final String toolChoiceAfterTools;
    private final Boolean parallelToolCalls;
    private final String reasoningEffort;
    private final Integer reasoningBudget;
    private final Boolean speculative;
    private final String outputSchema;
    private final Boolean internalToolExecutionEnabled;
    private final Map<String, Object> extraBody;

    /**
     * Use {@link #builder()}; for subclasses.
     *
     * @param portable Spring AI's fields (tool callbacks, tool context, the portable options)
     * @param b the builder, for llb's fields
     */
    protected LlbChatOptions(ToolCallingChatOptions portable, AbstractBuilder<?> b) {
        super(portable.getToolCallbacks(), portable.getToolContext(), portable.getModel(), portable.getFrequencyPenalty(),
                portable.getMaxTokens(), portable.getPresencePenalty(), portable.getStopSequences(), portable.getTemperature(),
                portable.getTopK(), portable.getTopP());
        this.seed = b.seed;
        this.toolChoice = b.toolChoice;
        this.toolChoiceAfterTools = b.toolChoiceAfterTools;
        this.parallelToolCalls = b.parallelToolCalls;
        this.reasoningEffort = b.reasoningEffort;
        this.reasoningBudget = b.reasoningBudget;
        this.speculative = b.speculative;
        this.outputSchema = b.outputSchema;
        this.internalToolExecutionEnabled = b.internalToolExecutionEnabled;
        this.extraBody = b.extraBody == null ? null : Collections.unmodifiableMap(new LinkedHashMap<>(b.extraBody));
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
     * {@link ChatOptions} of any kind as llb's options: the portable fields are kept, and the tool
     * callbacks and context of {@link ToolCallingChatOptions}.
     *
     * @param options the options, or null
     * @return llb's options (the same object when it already is)
     */
    public static LlbChatOptions from(ChatOptions options) {
        if (options instanceof LlbChatOptions llb) {
            return llb;
        }
        Builder b = builder();
        if (options != null) {
            b.model(options.getModel()).frequencyPenalty(options.getFrequencyPenalty()).maxTokens(options.getMaxTokens())
                    .presencePenalty(options.getPresencePenalty()).stopSequences(options.getStopSequences())
                    .temperature(options.getTemperature()).topK(options.getTopK()).topP(options.getTopP());
            if (options instanceof ToolCallingChatOptions tools) {
                b.toolCallbacks(tools.getToolCallbacks()).toolContext(tools.getToolContext());
            }
            if (options instanceof StructuredOutputChatOptions structured) {
                b.outputSchema(structured.getOutputSchema());
            }
        }
        return b.build();
    }

    /**
     * The sampling seed ({@code seed}).
     *
     * @return the seed, or null for the engine's
     */
    public Long getSeed() {
        return seed;
    }

    /**
     * {@code tool_choice}: {@code "auto"}, {@code "none"}, {@code "required"}, a tool name or a JSON object.
     *
     * @return the choice, or null (llb's default, {@code auto})
     */
    public String getToolChoice() {
        return toolChoice;
    }

    /**
     * The {@code tool_choice} of a request whose last message is a tool result.
     *
     * @return the choice, or null ({@link #getToolChoice()} applies)
     */
    public String getToolChoiceAfterTools() {
        return toolChoiceAfterTools;
    }

    /**
     * {@code parallel_tool_calls}.
     *
     * @return whether the model may call several tools in one reply, or null (llb's default, true)
     */
    public Boolean getParallelToolCalls() {
        return parallelToolCalls;
    }

    /**
     * {@code reasoning_effort}, handed to the chat template of reasoning models.
     *
     * @return {@code low}, {@code medium}, {@code high}, or null
     */
    public String getReasoningEffort() {
        return reasoningEffort;
    }

    /**
     * {@code reasoning_budget}: the tokens a reasoning model may think before llb ends the
     * thinking and the model answers.
     *
     * @return -1 unlimited, 0 no thinking, a token count, or null (the engine's default, else
     *     what {@code reasoning_effort} implies)
     */
    public Integer getReasoningBudget() {
        return reasoningBudget;
    }

    /**
     * {@code speculative}: whether this request drafts tokens ahead and has the model check them
     * in one batch (docs/design.md, "Speculative decoding"), over the engine's config
     * ({@code llb.chat.speculative.*}, {@link dev.llb.ChatConfig#withSpeculative}) for this
     * request. The completion's {@code timings.draft_n} and {@code timings.draft_accepted_n} say
     * how many tokens were drafted and accepted.
     *
     * @return true or false, or null (the engine's config decides)
     */
    public Boolean getSpeculative() {
        return speculative;
    }

    /**
     * The JSON schema the reply must follow, sent as llb's {@code response_format}
     * ({@code {"type":"json_schema","json_schema":{"name":"response","schema":...,"strict":true}}})
     * and enforced by llb's grammar.
     *
     * @return the schema as JSON text, or null (free text)
     */
    @Override
    public String getOutputSchema() {
        return outputSchema;
    }

    /**
     * Whether {@link LlbChatModel} runs the tool calls itself and calls the model again until it
     * answers (Spring AI 1.x's internal tool execution); null or false: it returns the tool calls,
     * and {@code ChatClient}'s tool-calling advisor runs them (Spring AI 2.0).
     *
     * @return the switch, or null
     */
    public Boolean getInternalToolExecutionEnabled() {
        return internalToolExecutionEnabled;
    }

    /**
     * Other request fields, sent as they are (e.g. {@code logit_bias}, {@code min_p},
     * {@code jump_forward}); they override the typed fields of the same name.
     *
     * @return the fields, or null
     */
    public Map<String, Object> getExtraBody() {
        return extraBody;
    }

    @Override
    public Builder mutate() {
        Builder b = builder();
        b.model(getModel()).frequencyPenalty(getFrequencyPenalty()).maxTokens(getMaxTokens())
                .presencePenalty(getPresencePenalty()).stopSequences(getStopSequences()).temperature(getTemperature())
                .topK(getTopK()).topP(getTopP()).toolCallbacks(getToolCallbacks()).toolContext(getToolContext());
        b.seed(seed).toolChoice(toolChoice).toolChoiceAfterTools(toolChoiceAfterTools).parallelToolCalls(parallelToolCalls)
                .reasoningEffort(reasoningEffort).reasoningBudget(reasoningBudget).speculative(speculative)
                .outputSchema(outputSchema)
                .internalToolExecutionEnabled(internalToolExecutionEnabled).extraBody(extraBody);
        return b;
    }

    @Override
    public boolean equals(Object o) {
        if (!super.equals(o)) {
            return false;
        }
        LlbChatOptions that = (LlbChatOptions) o;
        return Objects.equals(seed, that.seed) && Objects.equals(toolChoice, that.toolChoice)
                && Objects.equals(toolChoiceAfterTools, that.toolChoiceAfterTools)
                && Objects.equals(parallelToolCalls, that.parallelToolCalls)
                && Objects.equals(reasoningEffort, that.reasoningEffort)
                && Objects.equals(reasoningBudget, that.reasoningBudget) && Objects.equals(speculative, that.speculative)
                && Objects.equals(outputSchema, that.outputSchema)
                && Objects.equals(internalToolExecutionEnabled, that.internalToolExecutionEnabled)
                && Objects.equals(extraBody, that.extraBody);
    }

    @Override
    public int hashCode() {
        return Objects.hash(super.hashCode(), seed, toolChoice, toolChoiceAfterTools, parallelToolCalls, reasoningEffort,
                reasoningBudget, speculative, outputSchema, internalToolExecutionEnabled, extraBody);
    }

    @Override
    public String toString() {
        return "LlbChatOptions[temperature=" + getTemperature() + ", topP=" + getTopP() + ", topK=" + getTopK()
                + ", maxTokens=" + getMaxTokens() + ", seed=" + seed + ", toolChoice=" + toolChoice
                + ", toolChoiceAfterTools=" + toolChoiceAfterTools + ", parallelToolCalls=" + parallelToolCalls
                + ", reasoningEffort=" + reasoningEffort + ", reasoningBudget=" + reasoningBudget
                + ", speculative=" + speculative
                + ", outputSchema=" + (outputSchema == null ? "none" : "set")
                + ", tools=" + (getToolCallbacks() == null ? 0 : getToolCallbacks().size()) + "]";
    }

    /** The builder {@link LlbChatOptions#builder()} returns. */
    public static final class Builder extends AbstractBuilder<Builder> {
        Builder() {}
    }

    /**
     * The builder's fields and methods, generic so that a subclass's builder returns itself.
     *
     * @param <B> the concrete builder
     */
    public abstract static class AbstractBuilder<B extends AbstractBuilder<B>> extends DefaultToolCallingChatOptions.Builder<B>
            implements StructuredOutputChatOptions.Builder<B> {
        private Long seed;
        private String toolChoice;
        private String toolChoiceAfterTools;
        private Boolean parallelToolCalls;
        private String reasoningEffort;
        private Integer reasoningBudget;
        private Boolean speculative;
        private String outputSchema;
        private Boolean internalToolExecutionEnabled;
        private Map<String, Object> extraBody;

        /** For subclasses. */
        protected AbstractBuilder() {}

        /**
         * Sets {@code seed}.
         *
         * @param seed the sampling seed
         * @return this builder
         */
        public B seed(Long seed) {
            this.seed = seed;
            return self();
        }

        /**
         * Sets {@code tool_choice}.
         *
         * @param toolChoice {@code "auto"}, {@code "none"}, {@code "required"}, a tool name, or an OpenAI tool_choice JSON object
         * @return this builder
         */
        public B toolChoice(String toolChoice) {
            this.toolChoice = toolChoice;
            return self();
        }

        /**
         * Sets the {@code tool_choice} of requests whose last message is a tool result (the turn
         * after the tools ran), e.g. {@code "none"} or {@code "auto"} after a forced call.
         *
         * @param toolChoice the choice, as for {@link #toolChoice(String)}
         * @return this builder
         */
        public B toolChoiceAfterTools(String toolChoice) {
            this.toolChoiceAfterTools = toolChoice;
            return self();
        }

        /**
         * Sets {@code parallel_tool_calls}.
         *
         * @param parallel whether one reply may hold several tool calls
         * @return this builder
         */
        public B parallelToolCalls(Boolean parallel) {
            this.parallelToolCalls = parallel;
            return self();
        }

        /**
         * Sets {@code reasoning_effort}.
         *
         * @param effort {@code low}, {@code medium} or {@code high}
         * @return this builder
         */
        public B reasoningEffort(String effort) {
            this.reasoningEffort = effort;
            return self();
        }

        /**
         * Sets {@code reasoning_budget}.
         *
         * @param tokens -1 unlimited, 0 no thinking, or the most tokens the model may think
         * @return this builder
         */
        public B reasoningBudget(Integer tokens) {
            this.reasoningBudget = tokens;
            return self();
        }

        /**
         * Sets {@code speculative}: speculative decoding on or off for this request, whatever
         * the engine's config says.
         *
         * @param speculative true or false; null leaves it to the engine's config
         * @return this builder
         */
        public B speculative(Boolean speculative) {
            this.speculative = speculative;
            return self();
        }

        /**
         * Sets the JSON schema the reply must follow (llb's {@code response_format}, enforced by
         * its grammar); {@code ChatClient} sets it for {@code entity(...)} with native structured
         * output.
         *
         * @param outputSchema a JSON Schema as text, or null for free text
         * @return this builder
         */
        @Override
        public B outputSchema(String outputSchema) {
            this.outputSchema = outputSchema;
            return self();
        }

        /**
         * Whether the model runs the tool loop itself (see {@link LlbChatOptions#getInternalToolExecutionEnabled()}).
         *
         * @param enabled the switch
         * @return this builder
         */
        public B internalToolExecutionEnabled(Boolean enabled) {
            this.internalToolExecutionEnabled = enabled;
            return self();
        }

        /**
         * Sets other request fields, sent as they are.
         *
         * @param extra field names and JSON values (String, Number, Boolean, List, Map)
         * @return this builder
         */
        public B extraBody(Map<String, Object> extra) {
            this.extraBody = extra == null ? null : new LinkedHashMap<>(extra);
            return self();
        }

        /**
         * Sets tool callbacks (Spring AI's {@code ToolCallbacks.from(new MyTools())}, an MCP
         * client's {@code ToolCallbackProvider}, ...).
         *
         * @param toolCallbacks the tools
         * @return this builder
         */
        @Override
        public B toolCallbacks(List<ToolCallback> toolCallbacks) {
            return super.toolCallbacks(toolCallbacks);
        }

        @Override
        public B clone() {
            B copy = super.clone();
            AbstractBuilder<?> c = copy;
            c.extraBody = extraBody == null ? null : new LinkedHashMap<>(extraBody);
            return copy;
        }

        /**
         * Merges {@code other} into this builder: its set fields win; tool callbacks are added
         * (as Spring AI's builders do); llb's fields are taken from another llb builder.
         */
        @Override
        public B combineWith(ChatOptions.Builder<?> other) {
            super.combineWith(other);
            if (other instanceof AbstractBuilder<?> that) {
                if (that.seed != null) {
                    seed = that.seed;
                }
                if (that.toolChoice != null) {
                    toolChoice = that.toolChoice;
                }
                if (that.toolChoiceAfterTools != null) {
                    toolChoiceAfterTools = that.toolChoiceAfterTools;
                }
                if (that.parallelToolCalls != null) {
                    parallelToolCalls = that.parallelToolCalls;
                }
                if (that.reasoningEffort != null) {
                    reasoningEffort = that.reasoningEffort;
                }
                if (that.reasoningBudget != null) {
                    reasoningBudget = that.reasoningBudget;
                }
                if (that.speculative != null) {
                    speculative = that.speculative;
                }
                if (that.outputSchema != null) {
                    outputSchema = that.outputSchema;
                }
                if (that.internalToolExecutionEnabled != null) {
                    internalToolExecutionEnabled = that.internalToolExecutionEnabled;
                }
                if (that.extraBody != null) {
                    Map<String, Object> merged = extraBody == null ? new HashMap<>() : new HashMap<>(extraBody);
                    merged.putAll(that.extraBody);
                    extraBody = merged;
                }
            }
            return self();
        }

        @Override
        public LlbChatOptions build() {
            return new LlbChatOptions(super.build(), this);
        }
    }
}
