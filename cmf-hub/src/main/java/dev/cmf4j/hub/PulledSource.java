package dev.cmf4j.hub;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.SourceTensor;

import java.util.List;

/**
 * A snapshot's model source named by where it came from: provenance says {@code hf://ORG/REPO@COMMIT} (and the
 * revision asked for) rather than a path inside the cache; everything else is the wrapped source's.
 */
record PulledSource(ModelSource inner, HubUri asked, String commit, String file) implements ModelSource {
    @Override public ObjectNode arch() { return inner.arch(); }

    @Override public List<SourceTensor> tensors() { return inner.tensors(); }

    @Override public byte[] tokenizerJson() { return inner.tokenizerJson(); }

    @Override public ObjectNode tokenizerConfig() { return inner.tokenizerConfig(); }

    @Override public ObjectNode provenance() {
        ObjectNode p = inner.provenance().deepCopy();
        p.put("hf_repo", asked.repo());
        p.put("hf_revision", asked.revision());
        p.put("hf_commit", commit);
        if (file != null) p.put("hf_file", file);
        return p;
    }

    @Override public String describe() { return asked.at(commit) + (file == null ? "" : " " + file); }

    @Override public void close() { inner.close(); }
}
