// The remote tier in a build without libcurl (src/CMakeLists.txt): every fetch says so.
#include "store/remote_fetch.h"

namespace uma::store {

bool remote_tier_available() { return false; }

Status fetch_remote(const std::string& url, const std::shared_ptr<ModelImage>& image, VerifyPool&, const RemoteOptions&,
                    const ChunkCallback&, RemoteStats*) {
  Status s{ErrorCode::kUnavailable, "this build has no remote tier (libcurl was not found when it was built): cannot fetch " +
                                        url.substr(0, url.find('?'))};  // a presigned URL's query holds credentials
  image->fail(s);
  return s;
}

}  // namespace uma::store
