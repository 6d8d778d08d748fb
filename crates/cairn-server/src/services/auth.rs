//! `cairn.v1.AuthService`: principals and their tokens, for admins.

use cairn_api as pb;
use cairn_api::auth_service_server::AuthService;
use cairn_core::access::{Caller, Principal, Role};
use cairn_core::command::{Command, PrincipalCommand};
use cairn_core::error::{Excerpt, Result};
use cairn_store::records::PrincipalRecord;
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::{Authenticated, mint_token, token_sha256};
use crate::convert;

/// Default and maximum `page_size` of `ListPrincipals`.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// The auth service.
#[derive(Clone, Debug)]
pub struct AuthApi {
    state: State,
}

impl AuthApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        AuthApi { state }
    }

    async fn create(
        &self,
        who: &Authenticated,
        req: pb::CreatePrincipalRequest,
    ) -> Result<pb::CreatePrincipalResponse> {
        let pb::CreatePrincipalRequest { principal } = req;
        let principal = convert::principal_in(principal.unwrap_or_default())?;
        let token = mint_token()?;
        let command = PrincipalCommand::Create {
            principal,
            token_sha256: token_sha256(&token),
        };
        let (stored, revision) = self.apply(who, command).await?;
        Ok(pb::CreatePrincipalResponse {
            principal: Some(convert::principal_out(&stored.into_principal()?)),
            token,
            revision,
        })
    }

    async fn apply(
        &self,
        who: &Authenticated,
        command: PrincipalCommand,
    ) -> Result<(cairn_store::Applied, u64)> {
        self.state
            .store
            .apply(&who.caller, Command::Principal(command), 0)
            .await
    }

    async fn list(
        &self,
        who: &Authenticated,
        req: pb::ListPrincipalsRequest,
    ) -> Result<pb::ListPrincipalsResponse> {
        let pb::ListPrincipalsRequest {
            page_size,
            page_token,
        } = req;
        let limit = convert::page_size(page_size, DEFAULT_PAGE, MAX_PAGE)?;
        let after = (!page_token.is_empty()).then_some(page_token);
        let (mut page, revision) = self
            .state
            .store
            .list_principals(&who.caller, after, limit + 1)
            .await?;
        let next_page_token = if page.len() > limit {
            page.truncate(limit);
            page.last()
                .map(|p| p.principal.principal_id.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(pb::ListPrincipalsResponse {
            principals: page.iter().map(convert::principal_out).collect(),
            next_page_token,
            revision,
        })
    }

    async fn delete(
        &self,
        who: &Authenticated,
        req: pb::DeletePrincipalRequest,
    ) -> Result<pb::DeletePrincipalResponse> {
        let pb::DeletePrincipalRequest {
            principal_id,
            expected_revision,
        } = req;
        let command = PrincipalCommand::Delete {
            principal_id,
            expected_revision,
        };
        let (_, revision) = self.apply(who, command).await?;
        Ok(pb::DeletePrincipalResponse { revision })
    }

    async fn rotate(
        &self,
        who: &Authenticated,
        req: pb::RotateTokenRequest,
    ) -> Result<pb::RotateTokenResponse> {
        let pb::RotateTokenRequest { principal_id } = req;
        let token = mint_token()?;
        let command = PrincipalCommand::RotateToken {
            principal_id,
            token_sha256: token_sha256(&token),
        };
        let (_, revision) = self.apply(who, command).await?;
        Ok(pb::RotateTokenResponse { token, revision })
    }

    #[allow(clippy::unused_async)] // the one handler shape awaits every RPC
    async fn who_am_i(
        &self,
        who: &Authenticated,
        _req: pb::WhoAmIRequest,
    ) -> Result<pb::WhoAmIResponse> {
        let principal = match &who.caller {
            Caller::Principal(p) => p.clone(),
            Caller::Open => Principal {
                principal_id: "anonymous".into(),
                roles: [Role::Admin].into_iter().collect(),
                ..Principal::default()
            },
        };
        Ok(pb::WhoAmIResponse {
            principal: Some(convert::principal_out(&PrincipalRecord {
                principal,
                ..PrincipalRecord::default()
            })),
        })
    }
}

rpcs! {
    impl AuthService for AuthApi {
        #[instrument(skip_all, fields(principal_id = %Excerpt(r.get_ref().principal.as_ref().map_or("", |p| p.principal_id.as_str()))))]
        fn create_principal(r: pb::CreatePrincipalRequest) -> pb::CreatePrincipalResponse => create;
        #[instrument(skip_all)]
        fn list_principals(r: pb::ListPrincipalsRequest) -> pb::ListPrincipalsResponse => list;
        #[instrument(skip_all, fields(principal_id = %Excerpt(&r.get_ref().principal_id)))]
        fn delete_principal(r: pb::DeletePrincipalRequest) -> pb::DeletePrincipalResponse => delete;
        #[instrument(skip_all, fields(principal_id = %Excerpt(&r.get_ref().principal_id)))]
        fn rotate_token(r: pb::RotateTokenRequest) -> pb::RotateTokenResponse => rotate;
        #[instrument(skip_all)]
        fn who_am_i(r: pb::WhoAmIRequest) -> pb::WhoAmIResponse => who_am_i;
    }
}
