//! TEMPORARY stand-in (replaced by the real parser).
use std::str::FromStr;

#[derive(Clone)]
pub struct Target {
    config: postgres::Config,
    display: String,
    app: Option<String>,
}

impl Target {
    pub fn parse(url: &str, _env: &dyn Fn(&str) -> Option<String>) -> Result<Target, String> {
        let config = postgres::Config::from_str(url).map_err(|e| e.to_string())?;
        let display = match (url.find("://"), url.find('@')) {
            (Some(s), Some(at)) => {
                let userinfo = &url[s + 3..at];
                let user = userinfo.split(':').next().unwrap_or("");
                format!("{}{}{}", &url[..s + 3], user, &url[at..])
            }
            _ => url.to_owned(),
        };
        Ok(Target {
            config,
            display,
            app: None,
        })
    }
    pub fn display(&self) -> &str {
        &self.display
    }
    pub fn application_name_or(&self, default: &str) -> String {
        self.app.clone().unwrap_or_else(|| default.to_owned())
    }
    pub fn connect(&self, app: &str) -> Result<postgres::Client, String> {
        let mut c = self.config.clone();
        c.application_name(app);
        c.connect(postgres::NoTls)
            .map_err(|e| format!("cannot connect to {}: {e}", self.display))
    }
    pub fn cancel(&self, token: &postgres::CancelToken) -> Result<(), String> {
        token
            .cancel_query(postgres::NoTls)
            .map_err(|e| e.to_string())
    }
}
