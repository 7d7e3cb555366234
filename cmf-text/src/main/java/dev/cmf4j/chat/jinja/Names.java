package dev.cmf4j.chat.jinja;

import java.util.HashSet;
import java.util.List;
import java.util.Set;

/** Collects the variable names a piece of template reads (to know whether a macro uses caller/varargs/kwargs). */
final class Names {

    private final Set<String> names = new HashSet<>();

    boolean has(String name) {
        return names.contains(name);
    }

    void scanNodes(List<Node> nodes) {
        for (Node n : nodes) scan(n);
    }

    private void scan(Node n) {
        switch (n) {
            case Node.Data d -> { }
            case Node.Output o -> scan(o.expr());
            case Node.If i -> {
                for (Node.IfBranch b : i.branches()) {
                    scan(b.test());
                    scanNodes(b.body());
                }
                scanNodes(i.otherwise());
            }
            case Node.For f -> {
                scan(f.iter());
                scan(f.filter());
                scanNodes(f.body());
                scanNodes(f.otherwise());
            }
            case Node.Set s -> scan(s.value());
            case Node.SetBlock s -> {
                scan(s.filter());
                scanNodes(s.body());
            }
            case Node.Macro m -> {
                for (Node.Param p : m.params()) scan(p.defaultValue());
            }
            case Node.CallBlock c -> {
                scan(c.call());
                scanNodes(c.caller().body());
            }
            case Node.FilterBlock f -> {
                scan(f.filter());
                scanNodes(f.body());
            }
            case Node.With w -> {
                for (Expr e : w.values()) scan(e);
                scanNodes(w.body());
            }
            case Node.Block b -> scanNodes(b.body());
            case Node.Generation g -> scanNodes(g.body());
            case Node.Break b -> { }
            case Node.Continue c -> { }
        }
    }

    private void scanArgs(Expr.Args a) {
        for (Expr e : a.positional()) scan(e);
        for (Expr.Keyword k : a.keywords()) scan(k.value());
        scan(a.starArgs());
        scan(a.starKwargs());
    }

    private void scan(Expr e) {
        if (e == null) return;
        switch (e) {
            case Expr.Const c -> { }
            case Expr.Name n -> names.add(n.name());
            case Expr.ListLit l -> l.items().forEach(this::scan);
            case Expr.TupleLit t -> t.items().forEach(this::scan);
            case Expr.DictLit d -> {
                d.keys().forEach(this::scan);
                d.values().forEach(this::scan);
            }
            case Expr.GetAttr g -> scan(g.obj());
            case Expr.GetItem g -> {
                scan(g.obj());
                scan(g.key());
            }
            case Expr.SliceLit s -> {
                scan(s.start());
                scan(s.stop());
                scan(s.step());
            }
            case Expr.Call c -> {
                scan(c.fn());
                scanArgs(c.args());
            }
            case Expr.Filter f -> {
                scan(f.value());
                scanArgs(f.args());
            }
            case Expr.Test t -> {
                scan(t.value());
                scanArgs(t.args());
            }
            case Expr.Unary u -> scan(u.operand());
            case Expr.Binary b -> {
                scan(b.left());
                scan(b.right());
            }
            case Expr.And a -> {
                scan(a.left());
                scan(a.right());
            }
            case Expr.Or o -> {
                scan(o.left());
                scan(o.right());
            }
            case Expr.Not n -> scan(n.operand());
            case Expr.Compare c -> {
                scan(c.first());
                c.rest().forEach(this::scan);
            }
            case Expr.Concat c -> c.parts().forEach(this::scan);
            case Expr.CondExpr c -> {
                scan(c.test());
                scan(c.then());
                scan(c.otherwise());
            }
            case Expr.NsRef r -> names.add(r.name());
        }
    }
}
