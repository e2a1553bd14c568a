//! `ocsb password`: the web UI's login for this project (user, password, and the file it is
//! kept in), for a user who missed it at the first start or runs `ocsb run --no-browser`.

use crate::error::{Error, Result};
use crate::project::Project;
use crate::state;

pub fn run(project: &Project) -> Result<()> {
    let layout = state::Layout::of(&project.settings);
    let file = layout.password();
    // Read only: a project that never started has no password, and asking for it must not
    // create a state directory (the first start checks the settings and claims it).
    if !file.exists() {
        return Err(Error::failed(
            format!(
                "{} has no web password yet ({} does not exist)",
                project.checkout.display(),
                file.display()
            ),
            "`ocsb run` creates it at its first start and prints it; then `ocsb password` shows it again",
        ));
    }
    let sd = layout.open()?;
    // Read without following links, as the launcher reads it (the state directory is writable
    // for the sandbox).
    let password = state::password(&sd)?;
    println!("user:     {}", crate::web::auth::USER);
    println!("password: {password}");
    println!("file:     {}", file.display());
    println!("web UI:   http://127.0.0.1:{}/", project.settings.web_port());
    Ok(())
}
