package dev.cmf4j.chat.jinja;

import java.util.List;

/** Expression nodes, one record per jinja2 expression kind. {@code line} is the template line. */
sealed interface Expr {

    int line();

    record Const(Object value, int line) implements Expr { }

    record Name(String name, int line) implements Expr { }

    record ListLit(List<Expr> items, int line) implements Expr { }

    record TupleLit(List<Expr> items, int line) implements Expr { }

    record DictLit(List<Expr> keys, List<Expr> values, int line) implements Expr { }

    /** {@code obj.name}: attribute first, then item (jinja2's {@code getattr}). */
    record GetAttr(Expr obj, String name, int line) implements Expr { }

    /** {@code obj[key]}: item first, then attribute (jinja2's {@code getitem}). */
    record GetItem(Expr obj, Expr key, int line) implements Expr { }

    /** {@code start:stop:step} inside brackets; each part may be null. */
    record SliceLit(Expr start, Expr stop, Expr step, int line) implements Expr { }

    record Keyword(String name, Expr value) { }

    /** Call arguments as written: positional, keyword, {@code *args}, {@code **kwargs} (last two nullable). */
    record Args(List<Expr> positional, List<Keyword> keywords, Expr starArgs, Expr starKwargs) {
        static final Args NONE = new Args(List.of(), List.of(), null, null);
    }

    record Call(Expr fn, Args args, int line) implements Expr { }

    /** {@code value | name(args)}; value is null inside {@code {% filter %}} / {@code {% set x | f %}}. */
    record Filter(Expr value, String name, Args args, int line) implements Expr { }

    record Test(Expr value, String name, Args args, int line) implements Expr { }

    record Unary(String op, Expr operand, int line) implements Expr { }

    record Binary(String op, Expr left, Expr right, int line) implements Expr { }

    record And(Expr left, Expr right, int line) implements Expr { }

    record Or(Expr left, Expr right, int line) implements Expr { }

    record Not(Expr operand, int line) implements Expr { }

    /** {@code a < b <= c}: chained like Python. ops are "==", "!=", "<", "<=", ">", ">=", "in", "notin". */
    record Compare(Expr first, List<String> ops, List<Expr> rest, int line) implements Expr { }

    /** {@code a ~ b ~ c}. */
    record Concat(List<Expr> parts, int line) implements Expr { }

    /** {@code ns.attr} as the target of {@code set}. */
    record NsRef(String name, String attr, int line) implements Expr { }

    /** {@code then if test else otherwise}; otherwise null yields undefined. */
    record CondExpr(Expr test, Expr then, Expr otherwise, int line) implements Expr { }
}
