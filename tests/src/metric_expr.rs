//! An interpreter for perf's metric expressions (`tools/perf/util/expr.y`), written for the
//! tests only: it evaluates the pmu-events JSON strings directly, independently of the
//! transpiler that generates `topdown-tma/src/generated.rs`.

use std::collections::HashMap;

/// A parsed expression.
#[derive(Debug, Clone)]
pub enum Expr {
    /// A number.
    Num(f64),
    /// An event, metric or `#literal`, unescaped.
    Sym(String),
    /// `-x`.
    Neg(Box<Self>),
    /// `a op b`.
    Bin(char, Box<Self>, Box<Self>),
    /// `d_ratio`, `min`, `max`.
    Call(String, Box<Self>, Box<Self>),
    /// `then if cond else otherwise`.
    If(Box<Self>, Box<Self>, Box<Self>),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(f64),
    Sym(String),
    Op(char),
    If,
    Else,
}

fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let symbol_char = |c: char| c.is_ascii_alphanumeric() || "_.:@?#".contains(c);
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if symbol_char(c) || (c == '\\' && i + 1 < chars.len()) {
            let mut word = String::new();
            while i < chars.len() {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    word.push(chars[i + 1]);
                    i += 2;
                } else if symbol_char(chars[i])
                    // An exponent's sign belongs to the number: 1e-9.
                    || (chars[i] == '-' && word.ends_with('e') && word[..word.len() - 1].parse::<f64>().is_ok())
                {
                    word.push(chars[i]);
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(match word.as_str() {
                "if" => Token::If,
                "else" => Token::Else,
                _ => word.parse().map_or(Token::Sym(word), Token::Num),
            });
        } else {
            out.push(Token::Op(c));
            i += 1;
        }
    }
    out
}

fn precedence(op: char) -> Option<u8> {
    Some(match op {
        '|' => 1,
        '^' => 2,
        '&' => 3,
        '<' | '>' => 4,
        '+' | '-' => 5,
        '*' | '/' | '%' => 6,
        _ => return None,
    })
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Token {
        self.at += 1;
        self.tokens[self.at - 1].clone()
    }

    fn expect(&mut self, token: &Token) {
        assert_eq!(self.peek(), Some(token), "in {:?}", self.tokens);
        self.at += 1;
    }

    fn expr(&mut self) -> Expr {
        let value = self.binary(1);
        if self.peek() == Some(&Token::If) {
            self.next();
            let condition = self.binary(1);
            self.expect(&Token::Else);
            let otherwise = self.expr();
            return Expr::If(Box::new(condition), Box::new(value), Box::new(otherwise));
        }
        value
    }

    fn binary(&mut self, min: u8) -> Expr {
        let mut left = self.unary();
        while let Some(Token::Op(op)) = self.peek().cloned() {
            let Some(level) = precedence(op).filter(|&l| l >= min) else {
                break;
            };
            self.next();
            let right = self.binary(level + 1);
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
        left
    }

    fn unary(&mut self) -> Expr {
        match self.next() {
            Token::Op('-') => Expr::Neg(Box::new(self.unary())),
            Token::Op('(') => {
                let inner = self.expr();
                self.expect(&Token::Op(')'));
                inner
            }
            Token::Num(n) => Expr::Num(n),
            Token::Sym(name) if self.peek() == Some(&Token::Op('(')) => {
                self.next();
                let a = self.expr();
                self.expect(&Token::Op(','));
                let b = self.expr();
                self.expect(&Token::Op(')'));
                Expr::Call(name, Box::new(a), Box::new(b))
            }
            Token::Sym(name) => Expr::Sym(name),
            other => panic!("unexpected {other:?} in {:?}", self.tokens),
        }
    }
}

/// Parses one expression.
pub fn parse(text: &str) -> Expr {
    let mut parser = Parser {
        tokens: tokens(text),
        at: 0,
    };
    let expr = parser.expr();
    assert_eq!(parser.at, parser.tokens.len(), "trailing tokens in {text}");
    expr
}

/// Evaluates expressions against counts, literals, and other metrics (by name, recursively).
pub struct Env<'a> {
    /// Metric expressions by name.
    pub metrics: &'a HashMap<String, String>,
    /// Event counts; looked up as spelt, then without a `pmu@...@` wrapper, then in lower case.
    pub events: &'a dyn Fn(&str) -> f64,
    /// `#slots`, `#smt_on`, ...
    pub literals: &'a HashMap<String, f64>,
}

impl Env<'_> {
    /// The value of metric `name`.
    pub fn metric(&self, name: &str) -> f64 {
        self.eval(&parse(&self.metrics[name]))
    }

    /// The value of `expr`.
    pub fn eval(&self, expr: &Expr) -> f64 {
        let truth = |b: bool| if b { 1.0 } else { 0.0 };
        match expr {
            Expr::Num(n) => *n,
            Expr::Sym(name) if self.metrics.contains_key(name) => self.metric(name),
            // Literals are case-insensitive, as perf reads them (`#SMT_on`).
            Expr::Sym(name) if name.starts_with('#') => {
                *self
                    .literals
                    .iter()
                    .find(|(known, _)| known.eq_ignore_ascii_case(name))
                    .unwrap_or_else(|| panic!("no literal {name}"))
                    .1
            }
            Expr::Sym(name) => (self.events)(name),
            Expr::Neg(e) => -self.eval(e),
            Expr::If(c, y, n) => {
                if self.eval(c) != 0.0 {
                    self.eval(y)
                } else {
                    self.eval(n)
                }
            }
            Expr::Call(f, a, b) => {
                let (a, b) = (self.eval(a), self.eval(b));
                match f.as_str() {
                    "d_ratio" => {
                        if b == 0.0 {
                            0.0
                        } else {
                            a / b
                        }
                    }
                    "min" => a.min(b),
                    "max" => a.max(b),
                    other => panic!("unknown function {other}"),
                }
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.eval(a), self.eval(b));
                match op {
                    '+' => a + b,
                    '-' => a - b,
                    '*' => a * b,
                    '/' => a / b,
                    '%' => a % b,
                    '<' => truth(a < b),
                    '>' => truth(a > b),
                    '&' => truth(a != 0.0 && b != 0.0),
                    '|' => truth(a != 0.0 || b != 0.0),
                    '^' => truth((a != 0.0) != (b != 0.0)),
                    other => panic!("unknown operator {other}"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str) -> f64 {
        let metrics = HashMap::from([("m".to_owned(), "2 * x".to_owned())]);
        let literals = HashMap::from([("#slots".to_owned(), 5.0)]);
        let events = |name: &str| match name {
            "x" => 3.0,
            "topdown-fe-bound" => 7.0,
            "cpu@A,cmask=1@" => 11.0,
            other => panic!("{other}"),
        };
        Env {
            metrics: &metrics,
            events: &events,
            literals: &literals,
        }
        .eval(&parse(text))
    }

    #[test]
    fn follows_perf_precedence_and_syntax() {
        assert_eq!(eval("1 + 2 * 3 - 4 / 2"), 5.0);
        assert_eq!(eval("-x + m"), 3.0);
        assert_eq!(eval(r"topdown\-fe\-bound + cpu@A\,cmask\=1@"), 18.0);
        assert_eq!(eval("1 if #slots - 5 else 2"), 2.0);
        assert_eq!(eval("d_ratio(x, 0) + max(0, x - 10) + min(1, 2)"), 1.0);
        assert_eq!(eval("x > 2 & m > 7 | 0"), 0.0);
        assert_eq!(eval("1e-3 * 1000"), 1.0);
    }
}
