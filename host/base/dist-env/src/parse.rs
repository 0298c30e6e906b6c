//! Numbers read out of variables' values: a count or an index, a port; an
//! error naming the variable otherwise.

use crate::error::DistEnvError;
use crate::vars;

/// A decimal number; surrounding whitespace is allowed, a sign is not.
pub(crate) fn parse_usize(
    var: &'static str,
    text: &str,
    what: &'static str,
) -> Result<usize, DistEnvError> {
    let trimmed = text.trim();
    if trimmed.starts_with('+') {
        return Err(parse_error(var, text, what));
    }
    trimmed.parse().map_err(|_| parse_error(var, text, what))
}

pub(crate) fn parse_port(text: &str) -> Result<u16, DistEnvError> {
    match text.trim().parse::<u16>() {
        Ok(port) if port != 0 && !text.trim().starts_with('+') => Ok(port),
        _ => Err(parse_error(vars::MASTER_PORT, text, "port (1-65535)")),
    }
}

fn parse_error(var: &'static str, text: &str, what: &'static str) -> DistEnvError {
    DistEnvError::Parse {
        var,
        value: text.to_owned(),
        what,
    }
}
