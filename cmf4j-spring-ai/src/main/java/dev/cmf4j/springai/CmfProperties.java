package dev.cmf4j.springai;

import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code cmf4j.*} properties: the model ({@code cmf4j.model-path}: a CMF file or {@code hf://ORG/REPO[@REV]}), how to
 * run it, and the default sampling (greedy unless set).
 *
 * @param modelPath     a CMF file or an {@code hf://} address; without it nothing is configured
 * @param device        cpu (default), cuda or auto
 * @param threads       CPU threads (0: the process-wide pool)
 * @param contextLength positions a conversation may hold (0: min(4096, the model's))
 * @param parallel      conversations batched together (default 4)
 * @param quant         for {@code hf://}: the quantization to convert to (null keeps the source's float type)
 */
@ConfigurationProperties("cmf4j")
public record CmfProperties(String modelPath, String device, Integer threads, Integer contextLength, Integer parallel,
                            String quant, Double temperature, Double topP, Integer topK, Double minP,
                            Double repetitionPenalty, Integer maxTokens, Long seed) {}
