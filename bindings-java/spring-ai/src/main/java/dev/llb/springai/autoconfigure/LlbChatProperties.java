package dev.llb.springai.autoconfigure;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.DeprecatedConfigurationProperty;
import org.springframework.util.unit.DataSize;

/**
 * {@code llb.chat.*}: the model (a local GGUF, or a Hugging Face repository pulled at start-up),
 * the pool, the engine's CPU, GPU and KV-cache settings, and the default request options of the
 * {@link dev.llb.springai.LlbChatModel} bean. Spring Boot's configuration processor writes their
 * metadata ({@code META-INF/spring-configuration-metadata.json}): IDEs complete and document them.
 *
 * <pre>
 * spring.ai.model.chat=llb            # when another provider's starter is on the class path too
 * llb.chat.model-path=/models/qwen2.5-7b-instruct-q4_k_m.gguf
 * # or: llb.chat.pull.repo=Qwen/Qwen2.5-7B-Instruct-GGUF  (with llb.chat.pull.quant=Q4_K_M)
 * llb.chat.parallel=4
 * llb.chat.timeout=30s
 * llb.chat.context-size=16384
 * llb.chat.prompt-cache.dir=/var/cache/llb/prompts
 * llb.chat.speculative.type=ngram-mod
 * llb.chat.options.temperature=0.2
 * </pre>
 *
 * <p>Before 0.1 the pull settings were {@code llb.chat.model}, {@code llb.chat.quant}, ...: they
 * still bind, as deprecated aliases of {@code llb.chat.pull.*} ({@code llb.chat.model} is not a
 * model's name, as Spring AI's {@code *.chat.model} is: that is {@code llb.chat.options.model}).
 */
@ConfigurationProperties(prefix = LlbChatProperties.PREFIX)
public class LlbChatProperties {
    /** The properties' prefix. */
    public static final String PREFIX = "llb.chat";

    /** Whether to create the LlbChatModel bean (spring.ai.model.chat must also be llb, or unset). */
    private boolean enabled = true;
    /** The GGUF file to open (or set pull.repo). */
    private Path modelPath;
    /** Requests that decode at once (n_parallel). */
    private int parallel = 4;
    /** Requests that may wait for a turn (max_queue; llb's default: 16 x parallel); past them a call is refused with queue_full, which a RetryTemplate retries. */
    private Integer maxQueue;
    /** The time one model call may take, waiting included; then it is cancelled, its place in the pool freed, and it fails with a NonTransientAiException (default: no limit). */
    private Duration timeout;
    /** The KV cache all requests share, in tokens (n_ctx; llb's default: 4096 per parallel request, at most the model's training context each). */
    private Integer contextSize;
    /** CPU threads for decoding (n_threads; llb's default: every core); the ceiling when adaptive-threads is on. */
    private Integer threads;
    /** Whether the decode threads follow the cores the machine gives (adaptive_threads). */
    private Boolean adaptiveThreads;
    /** How hard idle compute threads poll before they sleep, 0 to 100 as llama.cpp's --poll (thread_poll). */
    private Integer threadPoll;
    /** Prompt tokens per decode batch (n_batch; at most context-size). */
    private Integer batchSize;
    /** Layers offloaded to GPUs (n_gpu_layers; -1: all; llb's default: all when there is a GPU, else 0). */
    private Integer gpuLayers;
    /** The GPU (among those used) for split-mode none, and for row split's intermediate results (main_gpu). */
    private Integer mainGpu;
    /** How the model is split across GPUs: none, layer or row (split_mode; llb's default: layer). */
    private String splitMode;
    /** The share of the model on each GPU, in device order (tensor_split). */
    private List<Double> tensorSplit;
    /** The GPUs to use, by name as dev.llb.Llb.devices() lists them (devices; llb's default: every GPU). */
    private List<String> devices;
    /** Flash attention: auto, on or off (flash_attn; llb's default: auto). */
    private String flashAttn;
    /** Whether the KV cache and attention go to the GPU too (offload_kqv; llb's default: true). */
    private Boolean offloadKqv;
    /** The K cache's type: f16, q8_0 or q4_0 (type_k; llb's default: f16). */
    private String cacheTypeK;
    /** The V cache's type: f16, q8_0 or q4_0 (type_v; llb's default: f16). */
    private String cacheTypeV;
    /** Whether the weights are memory-mapped (use_mmap; llb's default: true). */
    private Boolean mmap;
    /** Whether the weights are locked in RAM (use_mlock; llb's default: false). */
    private Boolean mlock;
    /** host:port of llama.cpp rpc-servers to offload to (rpc_servers); unauthenticated: loopback or a private network only. */
    private List<String> rpcServers;
    /** Pulling the model from Hugging Face at start-up, instead of model-path. */
    private final Pull pull = new Pull();
    /** The prompt cache: conversations that leave the context, kept in RAM and on disk. */
    private final PromptCache promptCache = new PromptCache();
    /** Speculative decoding: a drafter guesses tokens ahead, the model checks them in one batch. */
    private final Speculative speculative = new Speculative();
    /** Default request options. */
    private final Options options = new Options();

    /** Bound by Spring Boot from {@code llb.chat.*}. */
    public LlbChatProperties() {}

    /**
     * {@code llb.chat.pull.*}: a GGUF pulled from Hugging Face at start-up (sha256-verified,
     * resumable, cached), instead of {@code llb.chat.model-path}.
     */
    public static class Pull {
        /** Bound by Spring Boot from {@code llb.chat.pull.*}. */
        public Pull() {}

        /** A Hugging Face repository id ("org/name") to pull at start-up instead of model-path. */
        private String repo;
        /** The quantization to pick from the repository (llb's default: Q4_K_M, else the smallest). */
        private String quant;
        /** The GGUF file name in the repository, instead of quant. */
        private String file;
        /** The repository revision: branch, tag or commit (llb's default: main). */
        private String revision;
        /** Where pulled models are cached (llb's default: LLB_MODEL_CACHE, else ~/.chatbot_models). */
        private Path cacheDir;
        /** The hub's base URL (llb's default: HF_ENDPOINT, else https://huggingface.co); a mirror, or a test hub. */
        private String hubEndpoint;
        /** The hub token (llb's default: HF_TOKEN, else the token file of huggingface_hub); an empty string sends none. */
        private String token;
        /** Use only the cache: no network. */
        private boolean offline;

        /**
         * Returns the Hugging Face repository id.
         *
         * @return the Hugging Face repository id
         */
        public String getRepo() { return repo; }
        /**
         * Sets the Hugging Face repository id.
         *
         * @param v the Hugging Face repository id
         */
        public void setRepo(String v) { repo = v; }
        /**
         * Returns the quantization.
         *
         * @return the quantization
         */
        public String getQuant() { return quant; }
        /**
         * Sets the quantization.
         *
         * @param v the quantization
         */
        public void setQuant(String v) { quant = v; }
        /**
         * Returns the file name in the repository.
         *
         * @return the file name in the repository
         */
        public String getFile() { return file; }
        /**
         * Sets the file name in the repository.
         *
         * @param v the file name in the repository
         */
        public void setFile(String v) { file = v; }
        /**
         * Returns the revision.
         *
         * @return the revision
         */
        public String getRevision() { return revision; }
        /**
         * Sets the revision.
         *
         * @param v the revision
         */
        public void setRevision(String v) { revision = v; }
        /**
         * Returns the cache directory.
         *
         * @return the cache directory
         */
        public Path getCacheDir() { return cacheDir; }
        /**
         * Sets the cache directory.
         *
         * @param v the cache directory
         */
        public void setCacheDir(Path v) { cacheDir = v; }
        /**
         * Returns the hub endpoint.
         *
         * @return the hub endpoint
         */
        public String getHubEndpoint() { return hubEndpoint; }
        /**
         * Sets the hub endpoint.
         *
         * @param v the hub endpoint
         */
        public void setHubEndpoint(String v) { hubEndpoint = v; }
        /**
         * Returns the hub token.
         *
         * @return the hub token
         */
        public String getToken() { return token; }
        /**
         * Sets the hub token.
         *
         * @param v the hub token
         */
        public void setToken(String v) { token = v; }
        /**
         * Returns whether only the cache is used.
         *
         * @return whether only the cache is used
         */
        public boolean isOffline() { return offline; }
        /**
         * Sets whether only the cache is used.
         *
         * @param v whether only the cache is used
         */
        public void setOffline(boolean v) { offline = v; }
    }

    /**
     * {@code llb.chat.prompt-cache.*}: llb's {@code prompt_cache} (docs/design.md, "The prompt
     * cache"). Sizes are bytes, or a Spring {@link DataSize} ({@code 512MB}, {@code 16GB}: binary
     * units). Unset values take llb's defaults.
     */
    public static class PromptCache {
        /** Bound by Spring Boot from {@code llb.chat.prompt-cache.*}. */
        public PromptCache() {}

        /** Bytes of conversation states kept in RAM (ram_bytes; llb's default: sized from the model, at most 8 GiB; 0: none). */
        private DataSize ramBytes;
        /** The directory of the disk tier, shared across restarts and processes (dir; llb's default: none, no disk tier). */
        private Path dir;
        /** Bytes of prompt-cache files the directory may hold (disk_bytes; llb's default: 16 GiB; only with dir). */
        private DataSize diskBytes;

        /**
         * Returns ram_bytes.
         *
         * @return ram_bytes
         */
        public DataSize getRamBytes() { return ramBytes; }
        /**
         * Sets ram_bytes.
         *
         * @param v ram_bytes
         */
        public void setRamBytes(DataSize v) { ramBytes = v; }
        /**
         * Returns dir.
         *
         * @return dir
         */
        public Path getDir() { return dir; }
        /**
         * Sets dir.
         *
         * @param v dir
         */
        public void setDir(Path v) { dir = v; }
        /**
         * Returns disk_bytes.
         *
         * @return disk_bytes
         */
        public DataSize getDiskBytes() { return diskBytes; }
        /**
         * Sets disk_bytes.
         *
         * @param v disk_bytes
         */
        public void setDiskBytes(DataSize v) { diskBytes = v; }
    }

    /**
     * {@code llb.chat.speculative.*}: llb's {@code speculative} (docs/design.md, "Speculative
     * decoding"). Unset values take llb's defaults: llb picks the type and the draft sizes.
     */
    public static class Speculative {
        /** Bound by Spring Boot from {@code llb.chat.speculative.*}. */
        public Speculative() {}

        /** The drafter, by llama.cpp's name: none, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, draft-simple, draft-eagle3, draft-mtp (type; none: off unless a request asks). */
        private String type;
        /** The most tokens one draft holds, 1 to 256 (draft_max). */
        private Integer draftMax;
        /** The fewest tokens a draft must hold to be checked, 0 to draft-max (draft_min). */
        private Integer draftMin;
        /** The draft model's GGUF file, for the draft-* types (draft_model_path). */
        private Path draftModelPath;
        /** The draft model's layers offloaded to GPUs, -1 all (draft_n_gpu_layers). */
        private Integer draftNGpuLayers;

        /**
         * Returns type.
         *
         * @return type
         */
        public String getType() { return type; }
        /**
         * Sets type.
         *
         * @param v type
         */
        public void setType(String v) { type = v; }
        /**
         * Returns draft_max.
         *
         * @return draft_max
         */
        public Integer getDraftMax() { return draftMax; }
        /**
         * Sets draft_max.
         *
         * @param v draft_max
         */
        public void setDraftMax(Integer v) { draftMax = v; }
        /**
         * Returns draft_min.
         *
         * @return draft_min
         */
        public Integer getDraftMin() { return draftMin; }
        /**
         * Sets draft_min.
         *
         * @param v draft_min
         */
        public void setDraftMin(Integer v) { draftMin = v; }
        /**
         * Returns draft_model_path.
         *
         * @return draft_model_path
         */
        public Path getDraftModelPath() { return draftModelPath; }
        /**
         * Sets draft_model_path.
         *
         * @param v draft_model_path
         */
        public void setDraftModelPath(Path v) { draftModelPath = v; }
        /**
         * Returns draft_n_gpu_layers.
         *
         * @return draft_n_gpu_layers
         */
        public Integer getDraftNGpuLayers() { return draftNGpuLayers; }
        /**
         * Sets draft_n_gpu_layers.
         *
         * @param v draft_n_gpu_layers
         */
        public void setDraftNGpuLayers(Integer v) { draftNGpuLayers = v; }
    }

    /** {@code llb.chat.options.*}: the model's default request options. */
    public static class Options {
        /** Bound by Spring Boot from {@code llb.chat.options.*}. */
        public Options() {}

        /** The model's name in responses and observations (gen_ai.request.model; default: the GGUF's file name). */
        private String model;
        /** Sampling temperature. */
        private Double temperature;
        /** Nucleus sampling. */
        private Double topP;
        /** Top-k sampling. */
        private Integer topK;
        /** Tokens to generate at most. */
        private Integer maxTokens;
        /** Sampling seed. */
        private Long seed;
        /** tool_choice: auto, none, required or a tool name. */
        private String toolChoice;
        /** tool_choice of the request after tool results. */
        private String toolChoiceAfterTools;
        /** Whether one reply may hold several tool calls. */
        private Boolean parallelToolCalls;
        /** reasoning_effort for reasoning models. */
        private String reasoningEffort;
        /** reasoning_budget: tokens a reasoning model may think (-1 unlimited, 0 no thinking). */
        private Integer reasoningBudget;
        /** speculative: speculative decoding on or off for every request, over llb.chat.speculative.type. */
        private Boolean speculative;

        /**
         * Returns the model's name.
         *
         * @return the model's name
         */
        public String getModel() { return model; }
        /**
         * Sets the model's name.
         *
         * @param v the model's name
         */
        public void setModel(String v) { model = v; }
        /**
         * Returns the temperature.
         *
         * @return the temperature
         */
        public Double getTemperature() { return temperature; }
        /**
         * Sets the temperature.
         *
         * @param v the temperature
         */
        public void setTemperature(Double v) { temperature = v; }
        /**
         * Returns top_p.
         *
         * @return top_p
         */
        public Double getTopP() { return topP; }
        /**
         * Sets top_p.
         *
         * @param v top_p
         */
        public void setTopP(Double v) { topP = v; }
        /**
         * Returns top_k.
         *
         * @return top_k
         */
        public Integer getTopK() { return topK; }
        /**
         * Sets top_k.
         *
         * @param v top_k
         */
        public void setTopK(Integer v) { topK = v; }
        /**
         * Returns max_tokens.
         *
         * @return max_tokens
         */
        public Integer getMaxTokens() { return maxTokens; }
        /**
         * Sets max_tokens.
         *
         * @param v max_tokens
         */
        public void setMaxTokens(Integer v) { maxTokens = v; }
        /**
         * Returns the seed.
         *
         * @return the seed
         */
        public Long getSeed() { return seed; }
        /**
         * Sets the seed.
         *
         * @param v the seed
         */
        public void setSeed(Long v) { seed = v; }
        /**
         * Returns tool_choice.
         *
         * @return tool_choice
         */
        public String getToolChoice() { return toolChoice; }
        /**
         * Sets tool_choice.
         *
         * @param v tool_choice
         */
        public void setToolChoice(String v) { toolChoice = v; }
        /**
         * Returns tool_choice after tool results.
         *
         * @return tool_choice after tool results
         */
        public String getToolChoiceAfterTools() { return toolChoiceAfterTools; }
        /**
         * Sets tool_choice after tool results.
         *
         * @param v tool_choice after tool results
         */
        public void setToolChoiceAfterTools(String v) { toolChoiceAfterTools = v; }
        /**
         * Returns parallel_tool_calls.
         *
         * @return parallel_tool_calls
         */
        public Boolean getParallelToolCalls() { return parallelToolCalls; }
        /**
         * Sets parallel_tool_calls.
         *
         * @param v parallel_tool_calls
         */
        public void setParallelToolCalls(Boolean v) { parallelToolCalls = v; }
        /**
         * Returns reasoning_effort.
         *
         * @return reasoning_effort
         */
        public String getReasoningEffort() { return reasoningEffort; }
        /**
         * Sets reasoning_effort.
         *
         * @param v reasoning_effort
         */
        public void setReasoningEffort(String v) { reasoningEffort = v; }
        /**
         * Returns reasoning_budget.
         *
         * @return reasoning_budget
         */
        public Integer getReasoningBudget() { return reasoningBudget; }
        /**
         * Sets reasoning_budget.
         *
         * @param v reasoning_budget
         */
        public void setReasoningBudget(Integer v) { reasoningBudget = v; }
        /**
         * Returns speculative.
         *
         * @return speculative
         */
        public Boolean getSpeculative() { return speculative; }
        /**
         * Sets speculative.
         *
         * @param v speculative
         */
        public void setSpeculative(Boolean v) { speculative = v; }
    }

    /**
     * Returns whether the bean is created.
     *
     * @return whether the bean is created
     */
    public boolean isEnabled() { return enabled; }
    /**
     * Sets whether the bean is created.
     *
     * @param v whether the bean is created
     */
    public void setEnabled(boolean v) { enabled = v; }
    /**
     * Returns the GGUF file.
     *
     * @return the GGUF file
     */
    public Path getModelPath() { return modelPath; }
    /**
     * Sets the GGUF file.
     *
     * @param v the GGUF file
     */
    public void setModelPath(Path v) { modelPath = v; }
    /**
     * Returns n_parallel.
     *
     * @return n_parallel
     */
    public int getParallel() { return parallel; }
    /**
     * Sets n_parallel.
     *
     * @param v n_parallel
     */
    public void setParallel(int v) { parallel = v; }
    /**
     * Returns max_queue.
     *
     * @return max_queue
     */
    public Integer getMaxQueue() { return maxQueue; }
    /**
     * Sets max_queue.
     *
     * @param v max_queue
     */
    public void setMaxQueue(Integer v) { maxQueue = v; }
    /**
     * Returns the time a call may take.
     *
     * @return the time a call may take
     */
    public Duration getTimeout() { return timeout; }
    /**
     * Sets the time a call may take.
     *
     * @param v the time a call may take
     */
    public void setTimeout(Duration v) { timeout = v; }
    /**
     * Returns n_ctx.
     *
     * @return n_ctx
     */
    public Integer getContextSize() { return contextSize; }
    /**
     * Sets n_ctx.
     *
     * @param v n_ctx
     */
    public void setContextSize(Integer v) { contextSize = v; }
    /**
     * Returns n_threads.
     *
     * @return n_threads
     */
    public Integer getThreads() { return threads; }
    /**
     * Sets n_threads.
     *
     * @param v n_threads
     */
    public void setThreads(Integer v) { threads = v; }
    /**
     * Returns adaptive_threads.
     *
     * @return adaptive_threads
     */
    public Boolean getAdaptiveThreads() { return adaptiveThreads; }
    /**
     * Sets adaptive_threads.
     *
     * @param v adaptive_threads
     */
    public void setAdaptiveThreads(Boolean v) { adaptiveThreads = v; }
    /**
     * Returns thread_poll.
     *
     * @return thread_poll
     */
    public Integer getThreadPoll() { return threadPoll; }
    /**
     * Sets thread_poll.
     *
     * @param v thread_poll
     */
    public void setThreadPoll(Integer v) { threadPoll = v; }
    /**
     * Returns n_batch.
     *
     * @return n_batch
     */
    public Integer getBatchSize() { return batchSize; }
    /**
     * Sets n_batch.
     *
     * @param v n_batch
     */
    public void setBatchSize(Integer v) { batchSize = v; }
    /**
     * Returns n_gpu_layers.
     *
     * @return n_gpu_layers
     */
    public Integer getGpuLayers() { return gpuLayers; }
    /**
     * Sets n_gpu_layers.
     *
     * @param v n_gpu_layers
     */
    public void setGpuLayers(Integer v) { gpuLayers = v; }
    /**
     * Returns main_gpu.
     *
     * @return main_gpu
     */
    public Integer getMainGpu() { return mainGpu; }
    /**
     * Sets main_gpu.
     *
     * @param v main_gpu
     */
    public void setMainGpu(Integer v) { mainGpu = v; }
    /**
     * Returns split_mode.
     *
     * @return split_mode
     */
    public String getSplitMode() { return splitMode; }
    /**
     * Sets split_mode.
     *
     * @param v split_mode
     */
    public void setSplitMode(String v) { splitMode = v; }
    /**
     * Returns tensor_split.
     *
     * @return tensor_split
     */
    public List<Double> getTensorSplit() { return tensorSplit; }
    /**
     * Sets tensor_split.
     *
     * @param v tensor_split
     */
    public void setTensorSplit(List<Double> v) { tensorSplit = v; }
    /**
     * Returns devices.
     *
     * @return devices
     */
    public List<String> getDevices() { return devices; }
    /**
     * Sets devices.
     *
     * @param v devices
     */
    public void setDevices(List<String> v) { devices = v; }
    /**
     * Returns flash_attn.
     *
     * @return flash_attn
     */
    public String getFlashAttn() { return flashAttn; }
    /**
     * Sets flash_attn.
     *
     * @param v flash_attn
     */
    public void setFlashAttn(String v) { flashAttn = v; }
    /**
     * Returns offload_kqv.
     *
     * @return offload_kqv
     */
    public Boolean getOffloadKqv() { return offloadKqv; }
    /**
     * Sets offload_kqv.
     *
     * @param v offload_kqv
     */
    public void setOffloadKqv(Boolean v) { offloadKqv = v; }
    /**
     * Returns type_k.
     *
     * @return type_k
     */
    public String getCacheTypeK() { return cacheTypeK; }
    /**
     * Sets type_k.
     *
     * @param v type_k
     */
    public void setCacheTypeK(String v) { cacheTypeK = v; }
    /**
     * Returns type_v.
     *
     * @return type_v
     */
    public String getCacheTypeV() { return cacheTypeV; }
    /**
     * Sets type_v.
     *
     * @param v type_v
     */
    public void setCacheTypeV(String v) { cacheTypeV = v; }
    /**
     * Returns use_mmap.
     *
     * @return use_mmap
     */
    public Boolean getMmap() { return mmap; }
    /**
     * Sets use_mmap.
     *
     * @param v use_mmap
     */
    public void setMmap(Boolean v) { mmap = v; }
    /**
     * Returns use_mlock.
     *
     * @return use_mlock
     */
    public Boolean getMlock() { return mlock; }
    /**
     * Sets use_mlock.
     *
     * @param v use_mlock
     */
    public void setMlock(Boolean v) { mlock = v; }
    /**
     * Returns rpc_servers.
     *
     * @return rpc_servers
     */
    public List<String> getRpcServers() { return rpcServers; }
    /**
     * Sets rpc_servers.
     *
     * @param v rpc_servers
     */
    public void setRpcServers(List<String> v) { rpcServers = v; }
    /**
     * Returns the pull settings.
     *
     * @return {@code llb.chat.pull.*}
     */
    public Pull getPull() { return pull; }
    /**
     * Returns the prompt cache settings.
     *
     * @return {@code llb.chat.prompt-cache.*}
     */
    public PromptCache getPromptCache() { return promptCache; }
    /**
     * Returns the speculative decoding settings.
     *
     * @return {@code llb.chat.speculative.*}
     */
    public Speculative getSpeculative() { return speculative; }
    /**
     * Returns the default request options.
     *
     * @return the default request options
     */
    public Options getOptions() { return options; }

    /**
     * {@code llb.chat.model}, deprecated: the repository to pull.
     *
     * @return {@code llb.chat.pull.repo}
     * @deprecated use {@code llb.chat.pull.repo}; Spring AI's {@code *.chat.model} is a model's name
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.repo", reason = "Spring AI's *.chat.model is a model's name, not a repository")
    public String getModel() { return pull.repo; }
    /**
     * Sets {@code llb.chat.pull.repo}.
     *
     * @param v the repository
     * @deprecated use {@code llb.chat.pull.repo}
     */
    @Deprecated(since = "0.1.0")
    public void setModel(String v) { pull.repo = v; }
    /**
     * {@code llb.chat.quant}, deprecated.
     *
     * @return {@code llb.chat.pull.quant}
     * @deprecated use {@code llb.chat.pull.quant}
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.quant", reason = "the pull settings are under llb.chat.pull")
    public String getQuant() { return pull.quant; }
    /**
     * Sets {@code llb.chat.pull.quant}.
     *
     * @param v the value
     * @deprecated use {@code llb.chat.pull.quant}
     */
    @Deprecated(since = "0.1.0")
    public void setQuant(String v) { pull.quant = v; }
    /**
     * {@code llb.chat.file}, deprecated.
     *
     * @return {@code llb.chat.pull.file}
     * @deprecated use {@code llb.chat.pull.file}
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.file", reason = "the pull settings are under llb.chat.pull")
    public String getFile() { return pull.file; }
    /**
     * Sets {@code llb.chat.pull.file}.
     *
     * @param v the value
     * @deprecated use {@code llb.chat.pull.file}
     */
    @Deprecated(since = "0.1.0")
    public void setFile(String v) { pull.file = v; }
    /**
     * {@code llb.chat.revision}, deprecated.
     *
     * @return {@code llb.chat.pull.revision}
     * @deprecated use {@code llb.chat.pull.revision}
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.revision", reason = "the pull settings are under llb.chat.pull")
    public String getRevision() { return pull.revision; }
    /**
     * Sets {@code llb.chat.pull.revision}.
     *
     * @param v the value
     * @deprecated use {@code llb.chat.pull.revision}
     */
    @Deprecated(since = "0.1.0")
    public void setRevision(String v) { pull.revision = v; }
    /**
     * {@code llb.chat.cache-dir}, deprecated.
     *
     * @return {@code llb.chat.pull.cache-dir}
     * @deprecated use {@code llb.chat.pull.cache-dir}
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.cache-dir", reason = "the pull settings are under llb.chat.pull")
    public Path getCacheDir() { return pull.cacheDir; }
    /**
     * Sets {@code llb.chat.pull.cache-dir}.
     *
     * @param v the value
     * @deprecated use {@code llb.chat.pull.cache-dir}
     */
    @Deprecated(since = "0.1.0")
    public void setCacheDir(Path v) { pull.cacheDir = v; }
    /**
     * {@code llb.chat.hub-endpoint}, deprecated.
     *
     * @return {@code llb.chat.pull.hub-endpoint}
     * @deprecated use {@code llb.chat.pull.hub-endpoint}
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.hub-endpoint", reason = "the pull settings are under llb.chat.pull")
    public String getHubEndpoint() { return pull.hubEndpoint; }
    /**
     * Sets {@code llb.chat.pull.hub-endpoint}.
     *
     * @param v the value
     * @deprecated use {@code llb.chat.pull.hub-endpoint}
     */
    @Deprecated(since = "0.1.0")
    public void setHubEndpoint(String v) { pull.hubEndpoint = v; }
    /**
     * {@code llb.chat.token}, deprecated.
     *
     * @return {@code llb.chat.pull.token}
     * @deprecated use {@code llb.chat.pull.token}
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.token", reason = "the pull settings are under llb.chat.pull")
    public String getToken() { return pull.token; }
    /**
     * Sets {@code llb.chat.pull.token}.
     *
     * @param v the value
     * @deprecated use {@code llb.chat.pull.token}
     */
    @Deprecated(since = "0.1.0")
    public void setToken(String v) { pull.token = v; }
    /**
     * {@code llb.chat.offline}, deprecated.
     *
     * @return {@code llb.chat.pull.offline}
     * @deprecated use {@code llb.chat.pull.offline}
     */
    @Deprecated(since = "0.1.0")
    @DeprecatedConfigurationProperty(replacement = "llb.chat.pull.offline", reason = "the pull settings are under llb.chat.pull")
    public boolean isOffline() { return pull.offline; }
    /**
     * Sets {@code llb.chat.pull.offline}.
     *
     * @param v the value
     * @deprecated use {@code llb.chat.pull.offline}
     */
    @Deprecated(since = "0.1.0")
    public void setOffline(boolean v) { pull.offline = v; }
}
