package dev.cmf4j.model;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TensorEntry;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/** The tensors of an open CMF file (all shards merged), read in place from its memory map. */
public final class CmfWeights implements Weights {
    private final Map<String, Tensor> byName = new HashMap<>();
    private final List<String> skills;
    private final CmfFile file;
    private final dev.cmf4j.format.Masks masks;

    public CmfWeights(CmfFile file) {
        this.file = file;
        masks = file.masks().orElse(null);
        skills = file.header().skills().stream().map(dev.cmf4j.format.SkillRecord::id).toList();
        for (TensorEntry e : file.tensors()) byName.put(e.name(), new Tensor(e.name(), e.dtype(), e.shape(), e.data()));
    }

    @Override public Tensor find(String name) { return byName.get(name); }

    @Override public Set<String> names() { return byName.keySet(); }

    @Override public List<String> skillIds() { return skills; }

    @Override public void checkIntact() { file.checkIntact(); }

    @Override public dev.cmf4j.format.Masks masks() { return masks; }
}
