//! The profile in use: installed by the caller, else read once from the environment.

use std::sync::{Arc, RwLock};

use super::Profile;

static INSTALLED: RwLock<Option<Arc<Profile>>> = RwLock::new(None);

/// Makes `profile` the one [`active`] returns from now on.
pub(super) fn install(profile: Profile) {
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(profile));
}

/// The profile in use (see the module docs for the order). A profile file that cannot be read
/// is skipped for the built-in one; [`Profile::origin`] then says which was used.
pub fn active() -> Arc<Profile> {
    if let Some(p) = INSTALLED.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return p.clone();
    }
    #[cfg(feature = "profile")]
    let profile = Profile::from_environment();
    // No file is read: the built-in thresholds, whose origin says why.
    #[cfg(not(feature = "profile"))]
    let profile = Profile::builtin();
    let profile = Arc::new(profile);
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some(profile.clone());
    profile
}
