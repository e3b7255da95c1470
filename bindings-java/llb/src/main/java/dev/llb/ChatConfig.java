package dev.llb;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Path;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * How to open a {@link ChatEngine}: llb's engine config. Unset ({@code null}) values take llb's
 * defaults.
 *
 * @param modelPath the GGUF file ({@code model_path})
 * @param contextSize tokens of context, i.e. the KV cache size ({@code n_ctx}; llb's default 4096)
 * @param threads CPU threads for decoding ({@code n_threads})
 * @param batchSize prompt tokens per decode batch ({@code n_batch}; default 512)
 * @param seed default sampling seed for requests that send none ({@code seed})
 * @param chatTemplateKwargs extra variables for the chat template ({@code chat_template_kwargs})
 * @param backendOptions the device and memory fields by their config names ({@code n_gpu_layers},
 *     {@code main_gpu}, {@code split_mode}, {@code tensor_split}, {@code devices},
 *     {@code flash_attn}, {@code offload_kqv}, {@code type_k}, {@code type_v}, {@code use_mmap},
 *     {@code use_mlock}, {@code rpc_servers}; see docs/scaling.md), the thread settings
 *     ({@code adaptive_threads}, {@code thread_poll}), {@code prompt_cache} and
 *     {@code speculative}, set with the {@code with} methods below;
 *     llb checks them when the engine or pool opens
 */
public record ChatConfig(Path modelPath, Integer contextSize, Integer threads, Integer batchSize, Long seed,
        Map<String, Object> chatTemplateKwargs, Map<String, Object> backendOptions) {

    /** Copies the maps (null means none); {@code modelPath} is required. */
    public ChatConfig {
        Objects.requireNonNull(modelPath, "modelPath");
        chatTemplateKwargs = chatTemplateKwargs == null ? Map.of()
                : Collections.unmodifiableMap(new LinkedHashMap<>(chatTemplateKwargs));
        backendOptions = backendOptions == null ? Map.of()
                : Collections.unmodifiableMap(new LinkedHashMap<>(backendOptions));
    }

    /**
     * A config without device or memory settings (the constructor before they existed).
     *
     * @param modelPath the GGUF file
     * @param contextSize {@code n_ctx}
     * @param threads {@code n_threads}
     * @param batchSize {@code n_batch}
     * @param seed {@code seed}
     * @param chatTemplateKwargs {@code chat_template_kwargs}
     */
    public ChatConfig(Path modelPath, Integer contextSize, Integer threads, Integer batchSize, Long seed,
            Map<String, Object> chatTemplateKwargs) {
        this(modelPath, contextSize, threads, batchSize, seed, chatTemplateKwargs, null);
    }

    /**
     * A config with llb's defaults for everything but the model.
     *
     * @param modelPath the GGUF file
     * @return the config
     */
    public static ChatConfig of(Path modelPath) {
        return new ChatConfig(modelPath, null, null, null, null, null, null);
    }

    /**
     * Sets {@code n_ctx}.
     *
     * @param nCtx the context size in tokens
     * @return a copy with it set
     */
    public ChatConfig withContextSize(int nCtx) {
        return new ChatConfig(modelPath, nCtx, threads, batchSize, seed, chatTemplateKwargs, backendOptions);
    }

    /**
     * Sets {@code n_threads}.
     *
     * @param nThreads decoding threads (default: every core)
     * @return a copy with it set
     */
    public ChatConfig withThreads(int nThreads) {
        return new ChatConfig(modelPath, contextSize, nThreads, batchSize, seed, chatTemplateKwargs, backendOptions);
    }

    /**
     * Sets {@code n_batch}.
     *
     * @param nBatch the prompt batch size
     * @return a copy with it set
     */
    public ChatConfig withBatchSize(int nBatch) {
        return new ChatConfig(modelPath, contextSize, threads, nBatch, seed, chatTemplateKwargs, backendOptions);
    }

    /**
     * Sets {@code seed}.
     *
     * @param defaultSeed the sampling seed of requests that give none
     * @return a copy with it set
     */
    public ChatConfig withSeed(long defaultSeed) {
        return new ChatConfig(modelPath, contextSize, threads, batchSize, defaultSeed, chatTemplateKwargs, backendOptions);
    }

    /**
     * Sets {@code chat_template_kwargs}.
     *
     * @param kwargs extra chat template variables
     * @return a copy with them set
     */
    public ChatConfig withChatTemplateKwargs(Map<String, Object> kwargs) {
        return new ChatConfig(modelPath, contextSize, threads, batchSize, seed, kwargs, backendOptions);
    }

    /**
     * Sets {@code adaptive_threads}: whether the decode threads follow the cores the machine
     * gives, fewer while other processes or the host's own threads (garbage collector, JIT,
     * request threads) hold cores; {@link #withThreads n_threads} stays the ceiling. Off, every
     * decode asks for the full thread count (docs/scaling.md).
     *
     * @param adaptive default true (false keeps the thread count fixed at {@code threads})
     * @return a copy with it set
     */
    public ChatConfig withAdaptiveThreads(boolean adaptive) {
        return withOption("adaptive_threads", adaptive);
    }

    /**
     * Sets {@code thread_poll}: how hard idle compute threads poll for the next piece of work
     * before they sleep, as llama.cpp's {@code --poll}. 0 sleeps at once, leaving the cores to the
     * host; higher values trade CPU time for latency on a machine llb has to itself.
     *
     * @param level 0 to 100 (default 0); llb refuses others with {@code invalid_argument}
     * @return a copy with it set
     */
    public ChatConfig withThreadPoll(int level) {
        return withOption("thread_poll", level);
    }

    /**
     * Sets {@code reasoning_budget}: the default budget, in tokens, of a reasoning model's thinking
     * for requests that give none (a request's own {@code reasoning_budget} wins). llb ends the
     * thinking when the budget is spent and the model answers (docs/tool-calls.md).
     *
     * @param tokens -1 unlimited, 0 no thinking, or a token count
     * @return a copy with it set
     */
    public ChatConfig withReasoningBudget(int tokens) {
        return withOption("reasoning_budget", tokens);
    }

    /**
     * The {@code reasoning_budget} set by {@link #withReasoningBudget} (or {@link #withOption}).
     *
     * @return the budget in tokens, or null for llb's default
     */
    public Integer reasoningBudget() {
        return backendOptions.get("reasoning_budget") instanceof Number n ? n.intValue() : null;
    }

    /**
     * Sets {@code prompt_cache}: where conversations that leave the context are kept, so that a
     * later request beginning with one restores it instead of reading its prompt again — in RAM,
     * and with a directory across restarts and processes (docs/design.md, "The prompt cache").
     * Unset, llb keeps them in RAM (a budget sized from the model) and writes no files.
     *
     * @param cache e.g. {@code PromptCache.onDisk(dir).withDiskBytes(4L << 30)}, or
     *     {@link PromptCache#OFF}
     * @return a copy with it set
     */
    public ChatConfig withPromptCache(PromptCache cache) {
        Objects.requireNonNull(cache, "cache");
        return withOption("prompt_cache", cache.toMap());
    }

    /**
     * The {@code prompt_cache} set by {@link #withPromptCache} (or {@link #withOption}).
     *
     * @return the settings, or null for llb's defaults
     */
    public PromptCache promptCache() {
        return PromptCache.fromMap(backendOptions.get("prompt_cache"));
    }

    /**
     * Sets {@code speculative}: speculative decoding, where a drafter guesses the next tokens and
     * the model checks them in one batch (docs/design.md, "Speculative decoding"). Unset, llb
     * decides whether and how to draft; a request's {@code "speculative": true|false} overrides
     * the config for that request.
     *
     * @param speculative e.g. {@code Speculative.ngram("ngram-mod").withDraftMax(32)}, or
     *     {@link Speculative#off()}
     * @return a copy with it set
     */
    public ChatConfig withSpeculative(Speculative speculative) {
        Objects.requireNonNull(speculative, "speculative");
        return withOption("speculative", speculative.toMap());
    }

    /**
     * The {@code speculative} set by {@link #withSpeculative} (or {@link #withOption}).
     *
     * @return the settings, or null for llb's defaults
     * @throws IllegalArgumentException when {@link #withOption} set values llb refuses
     */
    public Speculative speculative() {
        return Speculative.fromMap(backendOptions.get("speculative"));
    }

    /**
     * Sets {@code n_gpu_layers}.
     *
     * @param layers layers to offload to GPUs (-1: all; default: all when a GPU exists, else 0)
     * @return a copy with it set
     */
    public ChatConfig withGpuLayers(int layers) {
        return withOption("n_gpu_layers", layers);
    }

    /**
     * Sets {@code main_gpu}.
     *
     * @param index the GPU (among those used) for {@code split_mode} none, and for row-split's
     *     intermediate results
     * @return a copy with it set
     */
    public ChatConfig withMainGpu(int index) {
        return withOption("main_gpu", index);
    }

    /**
     * Sets {@code split_mode}.
     *
     * @param mode {@code none}, {@code layer} (the default) or {@code row}
     * @return a copy with it set
     */
    public ChatConfig withSplitMode(String mode) {
        return withOption("split_mode", mode);
    }

    /**
     * Sets {@code tensor_split}.
     *
     * @param proportions the share of the model on each GPU, in device order
     * @return a copy with it set
     */
    public ChatConfig withTensorSplit(double... proportions) {
        return withOption("tensor_split", proportions.clone());
    }

    /**
     * Sets {@code devices}.
     *
     * @param names the GPUs to use, by {@link Llb#devices()} name
     * @return a copy with it set
     */
    public ChatConfig withDevices(String... names) {
        return withOption("devices", List.of(names));
    }

    /**
     * Sets {@code flash_attn}.
     *
     * @param mode {@code auto} (the default), {@code on} or {@code off}
     * @return a copy with it set
     */
    public ChatConfig withFlashAttn(String mode) {
        return withOption("flash_attn", mode);
    }

    /**
     * Sets {@code offload_kqv}.
     *
     * @param offload whether the KV cache and attention go to the GPU too (default true)
     * @return a copy with it set
     */
    public ChatConfig withOffloadKqv(boolean offload) {
        return withOption("offload_kqv", offload);
    }

    /**
     * Sets {@code type_k} and {@code type_v}.
     *
     * @param typeK the K cache type: {@code f16} (the default), {@code q8_0} or {@code q4_0}
     * @param typeV the V cache type, the same choices
     * @return a copy with them set
     */
    public ChatConfig withKvCacheTypes(String typeK, String typeV) {
        return withOption("type_k", typeK).withOption("type_v", typeV);
    }

    /**
     * Sets {@code use_mmap}.
     *
     * @param mmap whether the weights are memory-mapped (default true)
     * @return a copy with it set
     */
    public ChatConfig withMmap(boolean mmap) {
        return withOption("use_mmap", mmap);
    }

    /**
     * Sets {@code use_mlock}.
     *
     * @param mlock whether the weights are locked in RAM (default false)
     * @return a copy with it set
     */
    public ChatConfig withMlock(boolean mlock) {
        return withOption("use_mlock", mlock);
    }

    /**
     * Sets {@code rpc_servers}. llama.cpp's RPC is unauthenticated: loopback or a private network
     * only.
     *
     * @param endpoints {@code host:port} of running {@code rpc-server}s
     * @return a copy with it set
     */
    public ChatConfig withRpcServers(String... endpoints) {
        return withOption("rpc_servers", List.of(endpoints));
    }

    /**
     * Sets a device or memory field (or any other engine config field) by its llb name, for
     * values the typed methods do not express. Stored in {@link #backendOptions()}; it overrides
     * the typed fields of the same name.
     *
     * @param field the config field
     * @param value its JSON value (String, Number, Boolean, List, Map, arrays)
     * @return a copy with it set
     */
    public ChatConfig withOption(String field, Object value) {
        Objects.requireNonNull(field, "field");
        Map<String, Object> o = new LinkedHashMap<>(backendOptions);
        o.put(field, value);
        return new ChatConfig(modelPath, contextSize, threads, batchSize, seed, chatTemplateKwargs, o);
    }

    /** llb's config JSON; unset fields are left out. */
    String toJson() {
        ObjectNode json = Json.MAPPER.createObjectNode();
        json.put("model_path", modelPath.toString());
        putIfSet(json, "n_ctx", contextSize);
        putIfSet(json, "n_threads", threads);
        putIfSet(json, "n_batch", batchSize);
        if (seed != null) {
            json.put("seed", seed);
        }
        if (!chatTemplateKwargs.isEmpty()) {
            json.set("chat_template_kwargs", Json.MAPPER.valueToTree(chatTemplateKwargs));
        }
        backendOptions.forEach((field, value) -> json.set(field, Json.MAPPER.valueToTree(value)));
        try {
            return Json.MAPPER.writeValueAsString(json);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("chatTemplateKwargs cannot be written as JSON", e);
        }
    }

    private static void putIfSet(ObjectNode json, String field, Integer value) {
        if (value != null) {
            json.put(field, value);
        }
    }
}
