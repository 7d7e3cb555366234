package dev.cmf4j.chat.jinja;

import java.util.List;

/** Statement nodes of a parsed template. */
sealed interface Node {

    int line();

    record Data(String text, int line) implements Node { }

    record Output(Expr expr, int line) implements Node { }

    record IfBranch(Expr test, List<Node> body) { }

    record If(List<IfBranch> branches, List<Node> otherwise, int line) implements Node { }

    /** target is a Name or a TupleLit of Names. */
    record For(Expr target, Expr iter, Expr filter, boolean recursive, List<Node> body, List<Node> otherwise, int line) implements Node { }

    /** {@code set target = value}; target is a Name, a TupleLit of Names, or an NsRef. */
    record Set(Expr target, Expr value, int line) implements Node { }

    /** {@code set target [| filters] %}body{% endset}; filter is a chain of Filter nodes over a null value, or null. */
    record SetBlock(Expr target, Expr filter, List<Node> body, int line) implements Node { }

    record Param(String name, Expr defaultValue) { }

    record Macro(String name, List<Param> params, List<Node> body, boolean usesCaller, boolean usesVarargs, boolean usesKwargs, int line) implements Node { }

    /** {@code {% call(params) fn(args) %}body{% endcall %}}. */
    record CallBlock(Expr.Call call, Macro caller, int line) implements Node { }

    record FilterBlock(Expr filter, List<Node> body, int line) implements Node { }

    record With(List<Expr> targets, List<Expr> values, List<Node> body, int line) implements Node { }

    /** {@code {% block name %}} rendered in place (no inheritance without a loader). */
    record Block(String name, List<Node> body, int line) implements Node { }

    /** {@code {% generation %}} of transformers' AssistantTracker: renders its body unchanged. */
    record Generation(List<Node> body, int line) implements Node { }

    record Break(int line) implements Node { }

    record Continue(int line) implements Node { }
}
