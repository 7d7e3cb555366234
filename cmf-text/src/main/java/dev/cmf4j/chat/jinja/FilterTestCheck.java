package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.util.List;

/**
 * jinja2's compile-time check for unknown filters and tests: an unknown name is a
 * TemplateAssertionError when the template is compiled, except inside an {@code if} statement or
 * an inline {@code if} expression (jinja2's "soft" frames), where the error is deferred to
 * runtime and only raised if that code actually runs ("No filter named 'x' found."). Loop, macro,
 * call, with, filter and set blocks open a fresh, non-soft frame, as in jinja2's compiler.
 */
final class FilterTestCheck {

    private FilterTestCheck() { }

    static void check(List<Node> body) {
        nodes(body, false);
    }

    private static void nodes(List<Node> body, boolean soft) {
        for (Node n : body) node(n, soft);
    }

    private static void node(Node n, boolean soft) {
        switch (n) {
            case Node.Data d -> { }
            case Node.Output o -> expr(o.expr(), soft);
            case Node.If i -> {
                for (Node.IfBranch b : i.branches()) {
                    expr(b.test(), true);
                    nodes(b.body(), true);
                }
                nodes(i.otherwise(), true);
            }
            case Node.For f -> {
                expr(f.iter(), soft);
                expr(f.filter(), false);
                nodes(f.body(), false);
                nodes(f.otherwise(), soft);
            }
            case Node.Set s -> expr(s.value(), soft);
            case Node.SetBlock s -> {
                expr(s.filter(), false);
                nodes(s.body(), false);
            }
            case Node.Macro m -> {
                for (Node.Param p : m.params()) expr(p.defaultValue(), false);
                nodes(m.body(), false);
            }
            case Node.CallBlock c -> {
                expr(c.call(), soft);
                node(c.caller(), soft);
            }
            case Node.FilterBlock f -> {
                expr(f.filter(), false);
                nodes(f.body(), false);
            }
            case Node.With w -> {
                for (Expr e : w.values()) expr(e, soft);
                nodes(w.body(), false);
            }
            case Node.Block b -> nodes(b.body(), false);
            case Node.Generation g -> nodes(g.body(), false);
            case Node.Break b -> { }
            case Node.Continue c -> { }
        }
    }

    private static void args(Expr.Args a, boolean soft) {
        for (Expr e : a.positional()) expr(e, soft);
        for (Expr.Keyword k : a.keywords()) expr(k.value(), soft);
        expr(a.starArgs(), soft);
        expr(a.starKwargs(), soft);
    }

    private static void expr(Expr e, boolean soft) {
        if (e == null) return;
        switch (e) {
            case Expr.Const c -> { }
            case Expr.Name n -> { }
            case Expr.NsRef r -> { }
            case Expr.ListLit l -> l.items().forEach(x -> expr(x, soft));
            case Expr.TupleLit t -> t.items().forEach(x -> expr(x, soft));
            case Expr.DictLit d -> {
                d.keys().forEach(x -> expr(x, soft));
                d.values().forEach(x -> expr(x, soft));
            }
            case Expr.GetAttr g -> expr(g.obj(), soft);
            case Expr.GetItem g -> {
                expr(g.obj(), soft);
                expr(g.key(), soft);
            }
            case Expr.SliceLit s -> {
                expr(s.start(), soft);
                expr(s.stop(), soft);
                expr(s.step(), soft);
            }
            case Expr.Call c -> {
                expr(c.fn(), soft);
                args(c.args(), soft);
            }
            case Expr.Filter f -> {
                if (!soft && !Filters.exists(f.name())) throw new TemplateException(Kind.TemplateAssertionError, "No filter named '" + f.name() + "'.", f.line());
                expr(f.value(), soft);
                args(f.args(), soft);
            }
            case Expr.Test t -> {
                if (!soft && !Tests.exists(t.name())) throw new TemplateException(Kind.TemplateAssertionError, "No test named '" + t.name() + "'.", t.line());
                expr(t.value(), soft);
                args(t.args(), soft);
            }
            case Expr.Unary u -> expr(u.operand(), soft);
            case Expr.Binary b -> {
                expr(b.left(), soft);
                expr(b.right(), soft);
            }
            case Expr.And a -> {
                expr(a.left(), soft);
                expr(a.right(), soft);
            }
            case Expr.Or o -> {
                expr(o.left(), soft);
                expr(o.right(), soft);
            }
            case Expr.Not n -> expr(n.operand(), soft);
            case Expr.Compare c -> {
                expr(c.first(), soft);
                c.rest().forEach(x -> expr(x, soft));
            }
            case Expr.Concat c -> c.parts().forEach(x -> expr(x, soft));
            case Expr.CondExpr c -> {
                expr(c.test(), true);
                expr(c.then(), true);
                expr(c.otherwise(), true);
            }
        }
    }
}
