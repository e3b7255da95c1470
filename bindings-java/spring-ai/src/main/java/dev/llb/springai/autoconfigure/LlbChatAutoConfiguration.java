package dev.llb.springai.autoconfigure;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.llb.ChatConfig;
import dev.llb.Llb;
import dev.llb.LlbException;
import dev.llb.PromptCache;
import dev.llb.Speculative;
import dev.llb.springai.LlbChatModel;
import dev.llb.springai.LlbChatOptions;
import io.micrometer.observation.ObservationRegistry;
import java.nio.file.Path;
import java.util.List;
import java.util.function.BiFunction;
import org.springframework.ai.chat.observation.ChatModelObservationConvention;
import org.springframework.ai.model.SpringAIModelProperties;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.core.retry.RetryTemplate;
import org.springframework.util.unit.DataSize;

/**
 * Spring Boot auto-configuration of an {@link LlbChatModel} bean (a Spring AI {@code ChatModel})
 * from {@link LlbChatProperties llb.chat.*}: the model at {@code llb.chat.model-path}, or the
 * Hugging Face repository {@code llb.chat.pull.repo} pulled into {@code llb.chat.pull.cache-dir}
 * at start-up. A model llb refuses (its chat template cannot do tool calls) fails start-up with
 * llb's message.
 *
 * <p>It is a Spring AI provider as Ollama's and OpenAI's are: {@code spring.ai.model.chat=llb}
 * (or the property unset) selects it, any other value ({@code ollama}, {@code openai}, {@code none})
 * backs it off, so with another provider's starter on the class path one
 * {@code spring.ai.model.chat} picks the one {@code ChatModel} that {@code ChatClient} uses.
 * {@code llb.chat.enabled=false}, or an {@code LlbChatModel} bean of the application's own, also
 * turns it off.
 *
 * <p>The bean uses the application's {@link ToolCallingManager} bean when there is one, its
 * {@link RetryTemplate} (Spring AI's retry auto-configuration makes one from
 * {@code spring.ai.retry.*}): calls refused with {@code queue_full} or {@code busy} are retried by
 * it, others are not; with none, nothing is retried. Its {@link ObservationRegistry} (Boot
 * Actuator's, which feeds Micrometer's meters and tracing) and
 * {@link ChatModelObservationConvention} beans make every model call a Spring AI
 * {@code gen_ai.client.operation} observation.
 */
@AutoConfiguration(afterName = {"org.springframework.ai.model.tool.autoconfigure.ToolCallingAutoConfiguration",
        "org.springframework.ai.retry.autoconfigure.SpringAiRetryAutoConfiguration"})
@ConditionalOnProperty(name = SpringAIModelProperties.CHAT_MODEL, havingValue = LlbChatAutoConfiguration.PROVIDER,
        matchIfMissing = true)
@ConditionalOnProperty(prefix = LlbChatProperties.PREFIX, name = "enabled", havingValue = "true", matchIfMissing = true)
@EnableConfigurationProperties(LlbChatProperties.class)
public class LlbChatAutoConfiguration {
    /** The value of {@code spring.ai.model.chat} that selects llb. */
    public static final String PROVIDER = "llb";

    /** Created by Spring. */
    public LlbChatAutoConfiguration() {}

    /**
     * The chat model, closed with the context.
     *
     * @param properties {@code llb.chat.*}
     * @param toolCallingManager the application's, if any
     * @param observationRegistry the application's, if any (none: no observations)
     * @param observationConvention the application's, if any (none: Spring AI's default)
     * @param retryTemplate the application's, if it has exactly one (none: no retries)
     * @return the model over an open pool
     */
    @Bean
    @ConditionalOnMissingBean(LlbChatModel.class)
    public LlbChatModel llbChatModel(LlbChatProperties properties, ObjectProvider<ToolCallingManager> toolCallingManager,
            ObjectProvider<ObservationRegistry> observationRegistry,
            ObjectProvider<ChatModelObservationConvention> observationConvention,
            ObjectProvider<RetryTemplate> retryTemplate) {
        ChatConfig config = chatConfig(properties, modelPath(properties));
        LlbChatModel.Builder builder = LlbChatModel.builder().config(config).parallel(properties.getParallel())
                .maxQueue(properties.getMaxQueue()).defaultOptions(defaultOptions(properties.getOptions()))
                .timeout(properties.getTimeout()).retryTemplate(retryTemplate.getIfUnique());
        if (properties.getOptions().getModel() != null) {
            builder.modelName(properties.getOptions().getModel());
        }
        toolCallingManager.ifAvailable(builder::toolCallingManager);
        builder.observationRegistry(observationRegistry.getIfUnique(() -> ObservationRegistry.NOOP));
        observationConvention.ifAvailable(builder::observationConvention);
        return builder.build();
    }

    /** {@code llb.chat.options.*}: the model's default request options; unset ones are left out of requests. */
    static LlbChatOptions defaultOptions(LlbChatProperties.Options o) {
        return LlbChatOptions.builder().model(o.getModel()).temperature(o.getTemperature()).topP(o.getTopP()).topK(o.getTopK())
                .maxTokens(o.getMaxTokens()).seed(o.getSeed()).toolChoice(o.getToolChoice())
                .toolChoiceAfterTools(o.getToolChoiceAfterTools()).parallelToolCalls(o.getParallelToolCalls())
                .reasoningEffort(o.getReasoningEffort()).reasoningBudget(o.getReasoningBudget())
                .speculative(o.getSpeculative()).build();
    }

    /** The engine settings of {@code llb.chat.*} over {@code model}; unset properties take llb's defaults. */
    static ChatConfig chatConfig(LlbChatProperties p, Path model) {
        ChatConfig config = new ChatConfig(model, p.getContextSize(), p.getThreads(), p.getBatchSize(), null, null);
        config = ifSet(config, p.getAdaptiveThreads(), ChatConfig::withAdaptiveThreads);
        config = ifSet(config, p.getThreadPoll(), ChatConfig::withThreadPoll);
        config = ifSet(config, promptCache(p.getPromptCache()), ChatConfig::withPromptCache);
        config = ifSet(config, speculative(p.getSpeculative()), ChatConfig::withSpeculative);
        config = ifSet(config, p.getGpuLayers(), ChatConfig::withGpuLayers);
        return devices(config, p);
    }

    /** The GPU, memory and KV-cache settings of {@code llb.chat.*}, by llb's field names; unset ones are left out. */
    private static ChatConfig devices(ChatConfig config, LlbChatProperties p) {
        config = option(config, "main_gpu", p.getMainGpu());
        config = option(config, "split_mode", p.getSplitMode());
        config = option(config, "tensor_split", p.getTensorSplit());
        config = option(config, "devices", p.getDevices());
        config = option(config, "flash_attn", p.getFlashAttn());
        config = option(config, "offload_kqv", p.getOffloadKqv());
        config = option(config, "type_k", p.getCacheTypeK());
        config = option(config, "type_v", p.getCacheTypeV());
        config = option(config, "use_mmap", p.getMmap());
        config = option(config, "use_mlock", p.getMlock());
        return option(config, "rpc_servers", p.getRpcServers());
    }

    private static ChatConfig option(ChatConfig config, String field, Object value) {
        return value == null || (value instanceof List<?> list && list.isEmpty()) ? config : config.withOption(field, value);
    }

    /** {@code llb.chat.prompt-cache.*}, or null when none of it is set (llb's defaults). */
    private static PromptCache promptCache(LlbChatProperties.PromptCache p) {
        if (p.getRamBytes() == null && p.getDir() == null && p.getDiskBytes() == null) {
            return null;
        }
        return new PromptCache(bytes(p.getRamBytes()), p.getDir(), bytes(p.getDiskBytes()));
    }

    /**
     * {@code llb.chat.speculative.*}, or null when none of it is set (llb's defaults).
     *
     * @throws IllegalArgumentException naming the field, for a type or draft size llb refuses
     */
    private static Speculative speculative(LlbChatProperties.Speculative p) {
        if (p.getType() == null && p.getDraftMax() == null && p.getDraftMin() == null && p.getDraftModelPath() == null
                && p.getDraftNGpuLayers() == null) {
            return null;
        }
        try {
            return new Speculative(p.getType(), p.getDraftMax(), p.getDraftMin(), p.getDraftModelPath(),
                    p.getDraftNGpuLayers(), null);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("llb.chat.speculative.*: " + e.getMessage(), e);
        }
    }

    private static Long bytes(DataSize size) {
        return size == null ? null : size.toBytes();
    }

    /** {@code with.apply(config, value)}, or {@code config} as it is when the property is unset. */
    private static <T> ChatConfig ifSet(ChatConfig config, T value, BiFunction<ChatConfig, T, ChatConfig> with) {
        return value == null ? config : with.apply(config, value);
    }

    /** {@code model-path}, or the file {@code pull.repo} pulls to. */
    static Path modelPath(LlbChatProperties properties) {
        LlbChatProperties.Pull p = properties.getPull();
        if (properties.getModelPath() != null && p.getRepo() != null) {
            throw new IllegalStateException("set one of llb.chat.model-path and llb.chat.pull.repo, not both");
        }
        if (properties.getModelPath() != null) {
            return properties.getModelPath();
        }
        if (p.getRepo() == null) {
            throw new IllegalStateException("set llb.chat.model-path (a GGUF file) or llb.chat.pull.repo (a Hugging Face "
                    + "repository id, pulled at start-up), or spring.ai.model.chat to another provider");
        }
        ObjectNode request = new ObjectMapper().createObjectNode().put("repo", p.getRepo());
        putIfSet(request, "quant", p.getQuant());
        putIfSet(request, "filename", p.getFile());
        putIfSet(request, "revision", p.getRevision());
        putIfSet(request, "cache_dir", p.getCacheDir() == null ? null : p.getCacheDir().toString());
        putIfSet(request, "endpoint", p.getHubEndpoint());
        putIfSet(request, "token", p.getToken());
        request.put("offline", p.isOffline());
        try {
            String result = Llb.pull(request.toString(), null, null);
            return Path.of(new ObjectMapper().readTree(result).path("path").asText());
        } catch (LlbException e) {
            throw new NonTransientAiException("llb " + e.code() + ": " + e.getMessage(), e);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalStateException("llb's pull result does not parse", e);
        }
    }

    private static void putIfSet(ObjectNode node, String field, String value) {
        if (value != null) {
            node.put(field, value);
        }
    }
}
