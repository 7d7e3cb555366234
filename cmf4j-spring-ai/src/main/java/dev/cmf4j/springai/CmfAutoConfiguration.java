package dev.cmf4j.springai;

import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.ModelOptions;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;

/**
 * Spring Boot auto-configuration: with {@code cmf4j.model-path} set, a {@link CmfModel} (closed with the context) and
 * a {@link CmfChatModel} over it, Spring AI's {@code ChatModel}; either is left out when the application defines its own.
 */
@AutoConfiguration
@ConditionalOnProperty(prefix = "cmf4j", name = "model-path")
@EnableConfigurationProperties(CmfProperties.class)
public class CmfAutoConfiguration {

    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean
    public CmfModel cmfModel(CmfProperties p) {
        ModelOptions o = ModelOptions.defaults();
        if (p.device() != null) o = o.withDevice(p.device());
        if (p.threads() != null) o = o.withThreads(p.threads());
        if (p.contextLength() != null) o = o.withContextLength(p.contextLength());
        if (p.parallel() != null) o = o.withParallel(p.parallel());
        if (p.quant() != null) o = o.withQuant(p.quant());
        return Cmf.open(p.modelPath(), o);
    }

    @Bean
    @ConditionalOnMissingBean
    public CmfChatModel cmfChatModel(CmfModel model, CmfProperties p) {
        CmfChatOptions defaults = CmfChatOptions.builder().temperature(p.temperature()).topP(p.topP()).topK(p.topK())
                .maxTokens(p.maxTokens()).minP(p.minP()).repetitionPenalty(p.repetitionPenalty()).seed(p.seed()).build();
        return new CmfChatModel(model, defaults);
    }
}
